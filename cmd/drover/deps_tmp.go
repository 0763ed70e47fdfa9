// Temporary: keeps chosen dependencies in go.mod until code uses them. Delete once unused.
package main

import (
 _ "golang.org/x/crypto/ssh"
 _ "golang.org/x/crypto/ssh/knownhosts"
 _ "golang.org/x/crypto/ssh/agent"
 _ "github.com/pkg/sftp"
 _ "github.com/BurntSushi/toml"
 _ "github.com/NVIDIA/go-nvml/pkg/nvml"
 _ "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
 _ "github.com/urfave/cli/v2"
 _ "github.com/stretchr/testify/require"
 _ "github.com/kevinburke/ssh_config"
 _ "golang.org/x/term"
)

