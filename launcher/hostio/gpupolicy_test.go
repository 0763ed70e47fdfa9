package hostio

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
)

// TestGPUPolicy checks the conversion from the job file: the host's
// min_gpus wins over the job's, the job's applies where the host sets
// none, and the gpus key and gpu_max_used_mib pass through.
func TestGPUPolicy(t *testing.T) {
	job := config.Job{MinGPUs: 4, GPUMaxUsedMiB: 512}
	tests := []struct {
		name string
		host config.Host
		want gpu.Policy
	}{
		{"job's min_gpus", config.Host{Name: "a", GPUs: config.GPUSpec{Auto: true}},
			gpu.Policy{GPUs: gpu.Spec{Auto: true}, MinGPUs: 4, MaxUsedMiB: 512}},
		{"host's min_gpus wins", config.Host{Name: "b", GPUs: config.GPUSpec{Auto: true}, MinGPUs: 2},
			gpu.Policy{GPUs: gpu.Spec{Auto: true}, MinGPUs: 2, MaxUsedMiB: 512}},
		{"pinned", config.Host{Name: "c", GPUs: config.GPUSpec{List: []int{3, 1}}},
			gpu.Policy{GPUs: gpu.Spec{List: []int{3, 1}}, MinGPUs: 4, MaxUsedMiB: 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, GPUPolicy(tt.host, job))
			assert.Equal(t, tt.host.GPUs.String(), GPUPolicy(tt.host, job).GPUs.String(), "errors quote the key as written")
		})
	}
}
