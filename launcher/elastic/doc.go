// Package elastic decides how a run's group changes size between
// attempts (min_hosts, docs/restarts.md): whether the hosts left after a
// loss that no spare covered may go on without it (Decide, with the hosts
// a TensorFlow plan cannot lose: Pinned), and the job as the smaller
// group runs it (Config). It is pure: the connect phase
// (launcher/attempt_connect.go) asks it once host_wait is spent and the
// spares are tried, and `drover plan --hosts-lost` asks it to show the
// plan a job would shrink to; the plan itself (ranks, WORLD_SIZE,
// MASTER_ADDR, TF_CONFIG) is launcher/plan's, built afresh on the hosts
// kept.
package elastic
