//go:build !unix

package loadgen

// selfCPU is unknown without getrusage(2): the report then has no
// load generator CPU.
func selfCPU() (cpuTime, bool) { return cpuTime{}, false }
