/* A shared object that is no plugin: it exports no hcomm_transport_plugin. */
__attribute__((visibility("default"))) int not_a_transport(void) { return 42; }
