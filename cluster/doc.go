// Package cluster reaches the hosts of a fleet: the transports (SSH/SFTP
// and local) through which drover runs commands and copies files on each
// host, dialling with the user's ssh_config and known_hosts, and the
// conformance rules every transport meets (see transporttest).
//
// Data flows one way: cluster knows the hosts as config describes them and
// nothing about GPUs or plans; gpu and launcher build on what it returns.
package cluster
