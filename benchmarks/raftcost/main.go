// Command raftcost measures what idle etcd raft groups cost, to size
// replication's "many groups" design (docs/replication.md): the memory of
// a replica, and the CPU and messages of the ticks of groups that have
// nothing to replicate, with and without quiescence.
//
// Three nodes' replicas of every group run in this process over
// in-memory storage (raft.MemoryStorage) and an in-memory network, each
// group with a leader elected and a first entry committed. Each tick
// ticks every replica (heartbeats from leaders, answers from followers)
// and delivers every message until the groups are still; quiesced, the
// replicas only count the tick (RawNode.TickQuiesced) and nothing is sent.
// The figures per node are the process's divided by three.
//
//	go run ./benchmarks/raftcost -groups 1000,10000 -ticks 50
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const nodes = 3

// group is one raft group: a replica per node, raft ids 1..3.
type group struct {
	rn [nodes]*raft.RawNode
	st [nodes]*raft.MemoryStorage
}

func main() {
	sizes := flag.String("groups", "1000,10000", "groups per run (each with a replica on each of three nodes)")
	ticks := flag.Int("ticks", 50, "idle ticks measured per run")
	flag.Parse()
	fmt.Printf("machine: %d CPUs, %s/%s, %s; three nodes' replicas in one process, in-memory storage and network; ElectionTick 10, HeartbeatTick 1, CheckQuorum and PreVote on\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Println("| groups | memory a replica | idle tick: CPU a group (all 3 replicas) | messages a group a tick | quiesced tick: CPU a group | messages |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "raftcost: bad -groups entry %q\n", s)
			os.Exit(2)
		}
		run(n, *ticks)
	}
}

func run(n, ticks int) {
	logger := &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}
	before := heap()
	groups := make([]*group, n)
	for g := range groups {
		gr := &group{}
		for i := range nodes {
			st := raft.NewMemoryStorage()
			check(st.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}, Index: proto.Uint64(1), Term: proto.Uint64(1)}}))
			rn, err := raft.NewRawNode(&raft.Config{ID: uint64(i + 1), ElectionTick: 10, HeartbeatTick: 1, Storage: st,
				MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true, Logger: logger})
			check(err)
			gr.rn[i], gr.st[i] = rn, st
		}
		// Leaders spread over the nodes, a first entry committed.
		check(gr.rn[g%nodes].Campaign())
		gr.settle()
		check(gr.rn[g%nodes].Propose([]byte("x")))
		gr.settle()
		if gr.rn[g%nodes].Status().RaftState != raft.StateLeader {
			check(fmt.Errorf("group %d elected no leader", g))
		}
		groups[g] = gr
	}
	perReplica := float64(heap()-before) / float64(n*nodes)

	idle, msgs := tickAll(groups, ticks, (*raft.RawNode).Tick)
	quiesced, quiet := tickAll(groups, ticks, (*raft.RawNode).TickQuiesced)
	fmt.Printf("| %d | %.1f KiB | %s | %.1f | %s | %.1f |\n", n, perReplica/1024, idle, float64(msgs)/float64(ticks*n), quiesced,
		float64(quiet)/float64(ticks*n))
	runtime.KeepAlive(groups)
}

// tickAll ticks every replica of groups ticks times with tick, settling
// each group after each; it returns the CPU a group a tick and the
// messages delivered.
func tickAll(groups []*group, ticks int, tick func(*raft.RawNode)) (time.Duration, int) {
	cpu0, msgs := cpuTime(), 0
	for range ticks {
		for _, gr := range groups {
			for _, rn := range gr.rn {
				tick(rn)
			}
			msgs += gr.settle()
		}
	}
	return (cpuTime() - cpu0) / time.Duration(ticks*len(groups)), msgs
}

// settle handles every replica's Ready, delivering messages between them,
// until none has anything to do; it returns the messages delivered.
func (gr *group) settle() int {
	sent := 0
	for busy := true; busy; {
		busy = false
		for i, rn := range gr.rn {
			if !rn.HasReady() {
				continue
			}
			busy = true
			rd := rn.Ready()
			if !raft.IsEmptyHardState(rd.HardState) {
				check(gr.st[i].SetHardState(rd.HardState))
			}
			check(gr.st[i].Append(rd.Entries))
			for _, m := range rd.Messages {
				sent++
				_ = gr.rn[m.GetTo()-1].Step(m)
			}
			rn.Advance(rd)
		}
	}
	return sent
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "raftcost: %v\n", err)
		os.Exit(1)
	}
}
