// Command tetra is the messenger workload.
//
//	tetra serve    [flags]   run the server (embedded default: SQLite + in-process index)
//	tetra token    --user ID print a token for the server's secret
//	tetra loadgen  [flags]   drive load over real sockets and reconcile every message
//
// Every flag has an environment variable (TETRA_ plus the flag name in upper
// case with dashes as underscores, e.g. --addr and TETRA_ADDR; --data is TETRA_DATA_DIR); a flag given
// on the command line wins over the environment. `tetra <command> -h` lists
// them with their defaults.
package main
