module hcomm.local/hcomm

go 1.19
