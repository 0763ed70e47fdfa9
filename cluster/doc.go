// Package cluster reaches the hosts of a fleet: the transports (SSH/SFTP
// and local) through which drover runs commands and copies files on each
// host, dialling with the user's ssh_config and known_hosts, and the
// conformance rules every transport meets (see transporttest).
//
// A dial fails with a type callers branch on (errors.As): *AuthError (the
// host refused every key), *HostKeyError (unknown, changed, revoked or a
// refused certificate) or *UnreachableError (no connection: worth waiting
// for, IsUnreachable); never by matching text. known_hosts and ssh_config
// are read as OpenSSH reads them where it matters to reach hosts that ssh
// reaches: lines drover cannot read are skipped with one warning
// (DialOptions.Warn), host certificates and @revoked are honoured, and a
// config with Match criteria drover cannot evaluate is resolved by ssh -G.
//
// Data flows one way: cluster knows a host as an Endpoint (how to reach
// it) and nothing of the job file, GPUs or plans; the job file's host
// converts to an Endpoint (config.Host.Endpoint), and gpu and launcher
// build on what cluster returns. A test keeps cluster/config out of
// cluster's imports.
package cluster
