package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
)

// logFiles lists the bucket log files of the topic whose directory is
// dir (none if it has none yet): files named by their first offset, only
// those before the last of their log if older (closed ones, whose frames
// are found by their headers and read whole only when asked for).
func logFiles(dir string, older bool) []string {
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && regexp.MustCompile(`^[0-9]{20}$`).MatchString(d.Name()) {
			files = append(files, p)
		}
		return nil
	})
	if !older {
		return files
	}
	var closed []string
	for i, f := range files { // walked in order: a log's files by first offset
		if i+1 < len(files) && filepath.Dir(files[i+1]) == filepath.Dir(f) {
			closed = append(closed, f)
		}
	}
	return closed
}

// bothResume waits until each writer of l is acknowledged again, after
// a restart.
func bothResume(l *ledger) {
	GinkgoHelper()
	l.mark("spared")
	l.mark("victim")
	Eventually(func() bool {
		_, a := l.wait("spared")
		_, b := l.wait("victim")
		return a && b
	}).WithTimeout(2*time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), "writes never resumed after the restart")
}

// damagedCopy runs one damaged disk: writers through the home and
// through a follower of a replicated topic until enough is acknowledged;
// the follower stopped cleanly (its logs closed, every byte in its own
// files), a byte flipped in the record of an acknowledged message in its
// copy's log files, and the follower started again. Readers through the
// follower and through the home must read every acknowledged message
// once, in its key's order (the damaged copy serves nothing it lost:
// another replica answers), and the damaged node must say so. Its damaged
// replica fails alone (raft cannot take back a replica whose log lost
// what it acknowledged) and the topic goes on with the other two; the
// damaged node reports its copy to the topic's home, which has the unit
// sealed (a topic moved when the damaged copy is the home's) and the copy
// made again from the healthy ones: then every copy agrees, byte for
// byte, without an operator.
func damagedCopy(c *chaosCluster, fault, prefix string, d diskFault) {
	GinkgoHelper()
	uri, home, victim := c.topicFor(prefix, d.victim)
	spared := home
	if victim == home {
		spared = (home + 1) % 3
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		small := int64(api.MinSegmentBytes) // files that roll: older ones to damage
		_, err := client.NewAdmin(c.conns[home]).SetTopicPolicies(ctx, uri, &api.Policies{SegmentBytes: &small})
		Expect(err).NotTo(HaveOccurred())
	}
	l, stop := writeThrough(c, uri, spared, victim)
	defer stop()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", d.acks), "acknowledged before the damage")
	nd := c.nodes[victim]
	name, err := routing.ParseTopic(uri)
	Expect(err).NotTo(HaveOccurred())
	dir := filepath.Join(nd.dataDir, "topics", name.Tenant, name.Namespace, name.Name)
	// Its copy has files to damage (a follower opens its replicas as its
	// leader's messages come; a log rolls past segment_bytes).
	Eventually(func() []string { return logFiles(dir, d.older) }).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).
		ShouldNot(BeEmpty(), "%s's copy of %s has no log files to damage", nd.id, uri)
	nd.signal(syscall.SIGTERM)
	Eventually(nd.exited).WithTimeout(time.Minute).Should(BeClosed(), "%s did not stop", nd.id)
	file := damageRecord(dir, l, d.older, d.truncate)
	fmt.Fprintf(GinkgoWriter, "%s: %s damaged (of %s, home %s)\n", fault, file, uri, c.nodes[home].id)
	c.start(victim, "--replication-factor", "3")
	c.waitLive()
	bothResume(l)
	stop()
	v := check(c.conns[victim], uri, "chaos-check-damaged", l)
	fmt.Fprintf(GinkgoWriter, "%s: read through %s: %+v\n", fault, nd.id, v)
	w := check(c.conns[spared], uri, "chaos-check", l)
	fmt.Fprintf(GinkgoWriter, "%s: read through %s: %+v\n", fault, c.nodes[spared].id, w)
	w.lost += v.lost
	agreed := false
	defer func() { record(fault, w, nil, agreed) }()
	for _, v := range []verdict{v, w} {
		expectClean(v)
	}
	// A verification reads every copy, the damaged one too: found and said.
	Eventually(func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = client.NewAdmin(c.conns[spared]).VerifyReplicas(ctx, uri)
		return nd.logTail(100000)
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(MatchRegexp(`level=ERROR.*(damage|raft stopped)`), "%s did not say its copy was damaged", nd.id)
	// And made again from the other copies: every copy agrees.
	waitReplicasAgreeWithin(c.conns[spared], uri, w.acked-w.lost, 3*time.Minute)
	Expect(oneLeaderPerTerm(c, uri)).To(BeNumerically(">", 0), "no raft entry found on two copies")
	agreed = true
}

// damageRecord flips a byte of the payload of an acknowledged message
// in a log file of the topic whose directory is dir (its bucket logs:
// files named by their first offset), in a file before the last of its
// log if older, and returns the file. With truncate it cuts the file
// there instead, in the middle of the message's frame: the file loses
// that frame and every one after it.
func damageRecord(dir string, l *ledger, older, truncate bool) string {
	GinkgoHelper()
	files := logFiles(dir, older)
	l.mu.Lock()
	var seqs []int
	for seq := range l.acked {
		if seq >= 1_000_000 && seq < 1_000_000+200 {
			seqs = append(seqs, seq) // acknowledged early: long in a file
		}
	}
	l.mu.Unlock()
	for _, seq := range seqs {
		marker := []byte(strconv.Itoa(seq))
		for _, f := range files {
			b, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			i := bytes.Index(b, marker)
			if i < 0 {
				continue
			}
			if truncate {
				Expect(os.Truncate(f, int64(i))).To(Succeed())
				return f
			}
			fh, err := os.OpenFile(f, os.O_WRONLY, 0)
			Expect(err).NotTo(HaveOccurred())
			_, err = fh.WriteAt([]byte{b[i+len(marker)-1] ^ 0x01}, int64(i+len(marker)-1))
			Expect(err).NotTo(HaveOccurred())
			Expect(fh.Close()).To(Succeed())
			return f
		}
	}
	Fail(fmt.Sprintf("no acknowledged message found in the log files of %s (%d files)", dir, len(files)))
	return ""
}

// diskFault is a damaged disk: whose copy, and where in it.
type diskFault struct {
	name   string
	victim victim
	// older: a file before the last of its log (else any, the last one
	// in practice: the topic's logs are small).
	older bool
	// acks: acknowledged before the damage.
	acks int
	// truncate: the file cut in the middle of a record, not a byte
	// flipped.
	truncate bool
	// small: run in make test too (the others in make chaos only).
	small bool
}

var diskFaults = []diskFault{
	{name: "damage: a flipped byte in a follower's copy", victim: theFollower, acks: 300, small: true},
	{name: "damage: a flipped byte in an older file of the home's copy", victim: theHome, older: true, acks: 2000},
	{name: "damage: a follower's copy truncated in the middle of a record", victim: theFollower, acks: 300, truncate: true},
	{name: "damage: an older file of the home's copy truncated in the middle of a record", victim: theHome, older: true, acks: 2000, truncate: true},
}

var _ = Describe("Faults of disks", func() {
	for _, d := range diskFaults {
		It(d.name+", stopped cleanly and started again: every acknowledged message read, through the damaged node too, and the damage said", func() {
			if !d.small && !chaosFull() {
				Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
			}
			c := startChaosCluster("--replication-factor", "3")
			for round := range chaosRounds() {
				damagedCopy(c, d.name, fmt.Sprintf("disk%d-", round), d)
			}
		})
	}
})
