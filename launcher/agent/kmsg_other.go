//go:build !linux

package agent

import "errors"

// readKmsg: only Linux has /dev/kmsg (and NVIDIA's Linux driver).
func readKmsg() ([]byte, error) { return nil, errors.New("no /dev/kmsg on this system") }
