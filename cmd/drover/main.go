// Command drover launches and supervises distributed training jobs on a
// fleet of hosts reachable over SSH.
package main

func main() {}
