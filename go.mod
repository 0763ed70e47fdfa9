module github.com/droverhq/drover

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/ebitengine/purego v0.11.3
	github.com/kevinburke/ssh_config v1.6.0
	github.com/pkg/sftp v1.13.12
	github.com/stretchr/testify v1.12.1
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/crypto v0.58.0
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kr/fs v0.1.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
