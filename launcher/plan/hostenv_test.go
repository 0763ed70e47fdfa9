package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster/config"
)

// TestBuildHostEnv: [host.env] applies to that host's processes only, over
// [job.env]. (That it may not set what drover sets is checked at load,
// with the line: cluster/config's TestLoadErrors.)
func TestBuildHostEnv(t *testing.T) {
	a, b := cpuHost("a", "10.0.0.1"), cpuHost("b", "10.0.0.2")
	b.Env = map[string]string{"PATH": "/opt/py311/bin:/usr/bin", "OMP_NUM_THREADS": "2"}
	c := testConfig(config.PyTorch, a, b)
	c.Job.Env = map[string]string{"OMP_NUM_THREADS": "8", "HF_HOME": "/data/hf"}
	p := mustBuild(t, PlanInput{Config: c})
	env := map[string]map[string]string{}
	for _, pr := range p.Processes {
		env[pr.Host.Name] = pr.Env
	}
	_, hasPath := env["a"]["PATH"]
	assert.False(t, hasPath)
	assert.Equal(t, "/opt/py311/bin:/usr/bin", env["b"]["PATH"])
	assert.Equal(t, "8", env["a"]["OMP_NUM_THREADS"])
	assert.Equal(t, "2", env["b"]["OMP_NUM_THREADS"], "[host.env] wins over [job.env]")
	assert.Equal(t, "/data/hf", env["b"]["HF_HOME"])

}

// TestBuildIfaces: the interface found on each host becomes its
// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME; [job.env] and [host.env]
// win; tensorflow gets none; the rendezvous address is MASTER_ADDR.
func TestBuildIfaces(t *testing.T) {
	a, b := cpuHost("a", "10.0.0.1"), cpuHost("b", "10.0.0.2")
	ifaces := map[string]string{"a": "eth1", "b": "ens5"}
	c := testConfig(config.PyTorch, a, b)
	p := mustBuild(t, PlanInput{Config: c, Ifaces: ifaces})
	assert.Equal(t, "10.0.0.1", p.RendezvousAddr())
	for _, pr := range p.Processes {
		assert.Equal(t, ifaces[pr.Host.Name], pr.Env["NCCL_SOCKET_IFNAME"], pr.Name())
		assert.Equal(t, ifaces[pr.Host.Name], pr.Env["GLOO_SOCKET_IFNAME"], pr.Name())
	}

	b.Env = map[string]string{"GLOO_SOCKET_IFNAME": "bond0"}
	c = testConfig(config.PyTorch, a, b)
	c.Job.Env = map[string]string{"NCCL_SOCKET_IFNAME": "^docker"}
	p = mustBuild(t, PlanInput{Config: c, Ifaces: ifaces})
	for _, pr := range p.Processes {
		assert.Equal(t, "^docker", pr.Env["NCCL_SOCKET_IFNAME"], "the job's setting wins")
	}
	assert.Equal(t, "eth1", p.Processes[0].Env["GLOO_SOCKET_IFNAME"])
	assert.Equal(t, "bond0", p.Processes[1].Env["GLOO_SOCKET_IFNAME"], "the host's setting wins")

	tf := tfConfig(config.Roles{Worker: 2}, a, cpuHost("b", "10.0.0.2"))
	p = mustBuild(t, PlanInput{Config: tf, Ifaces: ifaces})
	assert.Empty(t, p.RendezvousAddr())
	for _, pr := range p.Processes {
		assert.NotContains(t, pr.Env, "GLOO_SOCKET_IFNAME")
	}
}
