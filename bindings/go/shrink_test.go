package hcomm_test

// TestShrinkAfterKill starts this test binary as 4 ranks by hand (a
// launcher would stop the job when one dies); each runs TestShrinkRank:
// rank 2 SIGKILLs itself once the others are past the warm-up, the others
// see ErrPeerFailure, Shrink to 3 ranks and AllReduce on them.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"hcomm.local/hcomm"
)

const shrinkRankEnv = "HCOMM_GO_SHRINK_RANK"

func TestShrinkAfterKill(t *testing.T) {
	if os.Getenv(shrinkRankEnv) != "" || os.Getenv(rankEnv) != "" {
		t.Skip("inside a rank")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	self, err := os.Executable()
	must(t, err)
	var env []string
	for _, kv := range os.Environ() {
		k := kv[:strings.IndexByte(kv, '=')]
		switch k {
		case "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "HCOMM_RANK",
			"HCOMM_WORLD_SIZE", "HCOMM_STORE_ADDR", "HCOMM_JOB_TOKEN", "HCOMM_RUN":
			continue
		}
		env = append(env, kv)
	}
	cmds := make([]*exec.Cmd, nRanks)
	outs := make([]strings.Builder, nRanks)
	for r := 0; r < nRanks; r++ {
		cmd := exec.Command(self, "-test.run=^TestShrinkRank$", "-test.v", "-test.timeout=50s")
		cmd.Env = append(append([]string{}, env...), shrinkRankEnv+"=1",
			fmt.Sprintf("HCOMM_RANK=%d", r), fmt.Sprintf("HCOMM_WORLD_SIZE=%d", nRanks),
			fmt.Sprintf("HCOMM_STORE_ADDR=127.0.0.1:%d", port), "HCOMM_JOB_TOKEN=go-shrink")
		cmd.Stdout = &outs[r]
		cmd.Stderr = &outs[r]
		must(t, cmd.Start())
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		t.Logf("rank %d: %v\n%s", r, err, outs[r].String())
		if r == 2 {
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("rank 2 was not killed: %v", err)
			}
		} else if err != nil || !strings.Contains(outs[r].String(), "--- PASS: TestShrinkRank") {
			t.Errorf("rank %d failed: %v", r, err)
		}
	}
}

func TestShrinkRank(t *testing.T) {
	if os.Getenv(shrinkRankEnv) == "" {
		t.Skip("run by TestShrinkAfterKill")
	}
	c, err := hcomm.Init(map[string]string{"timeout_ms": "10000"})
	must(t, err)
	rank := c.Rank()
	must(t, hcomm.AllReduce(c, []int32{1}, hcomm.Sum))
	// Rank 2 dies once every other rank has told it that it is done with
	// the world's collectives.
	if rank != 2 {
		must(t, hcomm.Send(c, []int32{1}, 2, 99))
	} else {
		for _, src := range []int{0, 1, 3} {
			_, err := hcomm.Recv(c, make([]int32, 1), src, 99)
			must(t, err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	err = hcomm.AllReduce(c, []int32{1}, hcomm.Sum)
	if !errors.Is(err, hcomm.ErrPeerFailure) {
		t.Fatalf("AllReduce with rank 2 dead: %v, want ErrPeerFailure", err)
	}
	s, err := c.Shrink()
	must(t, err)
	want := map[int]int{0: 0, 1: 1, 3: 2}[rank]
	if s.Size() != 3 || s.Rank() != want {
		t.Fatalf("Shrink: rank %d of %d, want %d of 3", s.Rank(), s.Size(), want)
	}
	buf := []int64{int64(rank + 1), 10}
	must(t, hcomm.AllReduce(s, buf, hcomm.Sum))
	if buf[0] != 1+2+4 || buf[1] != 30 {
		t.Fatalf("AllReduce on the shrunk communicator = %v, want [7 30]", buf)
	}
	must(t, c.Close()) // the old one goes first; the shrunk one stays usable
	must(t, s.Barrier())
	must(t, s.Close())
}
