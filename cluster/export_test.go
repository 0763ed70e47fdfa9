package cluster

// Parses is how many times k parsed known_hosts files.
func (k *KnownHosts) Parses() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.parses
}
