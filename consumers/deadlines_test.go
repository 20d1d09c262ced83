package consumers

import (
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

// The time-driven decisions, tested as the functions of now they are: each
// deadline is the first instant its decision holds, so a check a tick
// before it finds nothing and a check at it finds the thing due.

const tick = time.Nanosecond // time's resolution

func TestSessionExpired(t *testing.T) {
	t.Parallel()
	live := &consumerState{name: "a", timeout: 10 * time.Second, lastSeen: testStart}
	parked := &consumerState{name: "p", timeout: 10 * time.Second, lastSeen: testStart, parked: &parkedFetch{until: testStart.Add(time.Hour)}}
	tests := []struct {
		name string
		c    *consumerState
		now  time.Time
		want bool
	}{
		{"just heard from", live, testStart, false},
		{"a millisecond before its timeout", live, testStart.Add(10*time.Second - time.Millisecond), false},
		{"silent for exactly its timeout", live, testStart.Add(10 * time.Second), false},
		{"a tick past its timeout", live, testStart.Add(10*time.Second + tick), true},
		{"long past its timeout", live, testStart.Add(time.Hour), true},
		{"parked, long past its timeout", parked, testStart.Add(time.Hour), false},
	}
	for _, tt := range tests {
		if got := sessionExpired(tt.c, tt.now); got != tt.want {
			t.Errorf("%s: sessionExpired = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConsumerDeadlineIsTheFirstInstantSomethingIsDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    *consumerState
		want time.Time
		due  func(*consumerState, time.Time) bool
	}{
		{"session", &consumerState{timeout: 300 * time.Millisecond, lastSeen: testStart},
			testStart.Add(300*time.Millisecond + tick), sessionExpired},
		{"parked fetch", &consumerState{timeout: 300 * time.Millisecond, lastSeen: testStart, parked: &parkedFetch{until: testStart.Add(time.Second)}},
			testStart.Add(time.Second), parkOver},
	}
	for _, tt := range tests {
		at := consumerDeadline(tt.c)
		if !at.Equal(tt.want) {
			t.Errorf("%s: deadline %v, want %v", tt.name, at.Sub(testStart), tt.want.Sub(testStart))
		}
		if tt.due(tt.c, at.Add(-tick)) || !tt.due(tt.c, at) {
			t.Errorf("%s: due a tick before its deadline, or not at it", tt.name)
		}
	}
}

func TestDeadConsumersAndParkedOver(t *testing.T) {
	t.Parallel()
	consumers := map[string]*consumerState{
		"d": {name: "d", timeout: time.Second, lastSeen: testStart},
		"b": {name: "b", timeout: time.Second, lastSeen: testStart},
		"c": {name: "c", timeout: 3 * time.Second, lastSeen: testStart},
		"p": {name: "p", timeout: time.Second, lastSeen: testStart, parked: &parkedFetch{until: testStart.Add(2 * time.Second)}},
		"q": {name: "q", timeout: time.Second, lastSeen: testStart, parked: &parkedFetch{until: testStart.Add(5 * time.Second)}},
	}
	names := func(cs []*consumerState) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	tests := []struct {
		now          time.Time
		dead, parked []string
	}{
		{testStart.Add(time.Second), nil, nil},
		{testStart.Add(time.Second + tick), []string{"b", "d"}, nil},
		{testStart.Add(2 * time.Second), []string{"b", "d"}, []string{"p"}},
		{testStart.Add(3*time.Second + tick), []string{"b", "c", "d"}, []string{"p"}},
		{testStart.Add(5 * time.Second), []string{"b", "c", "d"}, []string{"p", "q"}},
	}
	for _, tt := range tests {
		if got := names(deadConsumers(consumers, tt.now)); !slices.Equal(got, tt.dead) {
			t.Errorf("at %v: dead %v, want %v", tt.now.Sub(testStart), got, tt.dead)
		}
		if got := names(parkedOver(consumers, tt.now)); !slices.Equal(got, tt.parked) {
			t.Errorf("at %v: parked fetches over %v, want %v", tt.now.Sub(testStart), got, tt.parked)
		}
	}
	if at, want := consumersDeadline(consumers), testStart.Add(time.Second+tick); !at.Equal(want) {
		t.Errorf("earliest consumer deadline %v, want %v", at.Sub(testStart), want.Sub(testStart))
	}
	if at := consumersDeadline(nil); !at.IsZero() {
		t.Errorf("deadline of no consumer %v, want none", at)
	}
}

func TestGrace(t *testing.T) {
	t.Parallel()
	if got := graceEnd(testStart, 300*time.Millisecond, 10*time.Second); !got.Equal(testStart.Add(300 * time.Millisecond)) {
		t.Errorf("grace with a recorded timeout ends at %v", got.Sub(testStart))
	}
	if got := graceEnd(testStart, 0, 10*time.Second); !got.Equal(testStart.Add(10 * time.Second)) {
		t.Errorf("grace without a recorded timeout ends at %v, want the default's", got.Sub(testStart))
	}
	awaiting := map[string]time.Time{"b": testStart.Add(time.Second), "a": testStart.Add(time.Second), "c": testStart.Add(2 * time.Second)}
	tests := []struct {
		now  time.Time
		want []string
	}{
		{testStart, nil},
		{testStart.Add(time.Second - tick), nil},
		{testStart.Add(time.Second), []string{"a", "b"}},
		{testStart.Add(2 * time.Second), []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		if got := graceOver(awaiting, tt.now); !slices.Equal(got, tt.want) {
			t.Errorf("at %v: graces over %v, want %v", tt.now.Sub(testStart), got, tt.want)
		}
	}
	if at := graceDeadline(awaiting); !at.Equal(testStart.Add(time.Second)) {
		t.Errorf("earliest grace end %v", at.Sub(testStart))
	}
	if at := graceDeadline(nil); !at.IsZero() {
		t.Errorf("grace deadline with nobody awaited %v, want none", at)
	}
}

func TestLoadRetryDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		brokenAt, now time.Time
		want          bool
	}{
		{testStart, testStart, false},
		{testStart, testStart.Add(loadRetryEvery - tick), false},
		{testStart, testStart.Add(loadRetryEvery), true},
		{time.Time{}, testStart, true}, // a failed retire: at once
	}
	for _, tt := range tests {
		if got := loadRetryDue(tt.brokenAt, tt.now); got != tt.want {
			t.Errorf("broken at %v, now %v: retry due %v, want %v", tt.brokenAt, tt.now, got, tt.want)
		}
	}
}

func TestEarlier(t *testing.T) {
	t.Parallel()
	a, b := testStart, testStart.Add(time.Second)
	tests := []struct{ x, y, want time.Time }{
		{time.Time{}, time.Time{}, time.Time{}},
		{a, time.Time{}, a},
		{time.Time{}, b, b},
		{a, b, a},
		{b, a, a},
	}
	for _, tt := range tests {
		if got := earlier(tt.x, tt.y); !got.Equal(tt.want) {
			t.Errorf("earlier(%v, %v) = %v, want %v", tt.x, tt.y, got, tt.want)
		}
	}
}

func TestAckDeadline(t *testing.T) {
	t.Parallel()
	now := testStart.UnixMilli()
	if got := (queuePolicy{}).ackDeadline(now); got != 0 {
		t.Errorf("ack deadline without an ack timeout %d, want none", got)
	}
	if got := (queuePolicy{AckTimeout: 30 * time.Second}).ackDeadline(now); got != now+30_000 {
		t.Errorf("ack deadline %d ms after delivery, want 30000", got-now)
	}
}

func TestRedeliverAt(t *testing.T) {
	t.Parallel()
	backoff := queuePolicy{NackDelay: 400 * time.Millisecond, NackBackoff: 2, MaxNackDelay: 600 * time.Millisecond}
	capped := backoff
	capped.MaxDeliveries = 3
	ms := func(d time.Duration) int64 { return testStart.Add(d).UnixMilli() }
	tests := []struct {
		name       string
		p          queuePolicy
		deliveries uint32
		delay      time.Duration
		want       int64
	}{
		{"a nack without delay", backoff, 1, 0, 0},
		{"a nack with its own delay", backoff, 1, 250 * time.Millisecond, ms(250 * time.Millisecond)},
		{"the policy's delay after the first delivery", backoff, 1, -1, ms(400 * time.Millisecond)},
		{"the backoff after the second, capped", backoff, 2, -1, ms(600 * time.Millisecond)},
		{"a policy without delay", queuePolicy{NackBackoff: 1}, 4, -1, 0},
		{"below the max deliveries", capped, 2, -1, ms(600 * time.Millisecond)},
		{"at the max deliveries: dead-lettered at once", capped, 3, time.Hour, 0},
	}
	for _, tt := range tests {
		if got := tt.p.redeliverAt(tt.deliveries, tt.delay, testStart); got != tt.want {
			t.Errorf("%s: redeliver at %+d ms, want %+d", tt.name, got-testStart.UnixMilli(), tt.want-testStart.UnixMilli())
		}
	}
}

func TestDueOffsets(t *testing.T) {
	t.Parallel()
	newUnit := func() *queueUnit {
		u := &queueUnit{floor: 10}
		u.extend(17, entryReady, 0, "")
		u.setState(&u.entries[0], entryInflight, 100) // ack deadline
		u.setState(&u.entries[1], entryDelayed, 200)  // redelivery
		u.setState(&u.entries[2], entryInflight, 0)   // no ack timeout
		u.setState(&u.entries[3], entryAcked, 0)
		u.setState(&u.entries[4], entryDead, 0)
		u.setState(&u.entries[5], entryDelayed, 150)
		return u // entries[6] ready
	}
	tests := []struct {
		now      int64
		mayBeDue bool
		due      []uint64
		next     int64
	}{
		{99, false, nil, 100},
		{100, true, []uint64{10}, 150},
		{199, true, []uint64{10, 15}, 200},
		{200, true, []uint64{10, 11, 15}, 0},
	}
	for _, tt := range tests {
		u := newUnit()
		if got := u.mayBeDue(tt.now); got != tt.mayBeDue {
			t.Errorf("at %d: mayBeDue %v, want %v", tt.now, got, tt.mayBeDue)
		}
		due, next := u.dueOffsets(tt.now, nil)
		if !slices.Equal(due, tt.due) || next != tt.next {
			t.Errorf("at %d: due %v, next %d; want %v, %d", tt.now, due, next, tt.due, tt.next)
		}
	}
	// The scratch list is reused, not grown, once it has room.
	buf := make([]uint64, 0, 8)
	if due, _ := newUnit().dueOffsets(200, buf); &due[:1][0] != &buf[:1][0] {
		t.Error("dueOffsets did not append to the list it was given")
	}
}

func TestQueueDeadline(t *testing.T) {
	t.Parallel()
	units := map[topology.Unit]*queueUnit{
		{Segment: 0, Bucket: 0}: {minDue: 0},
		{Segment: 0, Bucket: 1}: {minDue: testStart.Add(2 * time.Second).UnixMilli()},
		{Segment: 1, Bucket: 0}: {minDue: testStart.Add(time.Second).UnixMilli()},
	}
	if at := queueDeadline(units); !at.Equal(testStart.Add(time.Second)) {
		t.Errorf("queue deadline %v, want 1s", at.Sub(testStart))
	}
	// At its deadline (in unix ms, as the actor checks) the unit may be due.
	if u := units[topology.Unit{Segment: 1}]; !u.mayBeDue(testStart.Add(time.Second).UnixMilli()) || u.mayBeDue(testStart.Add(time.Second-time.Millisecond).UnixMilli()) {
		t.Error("a unit is not due at its queue deadline, or is a millisecond before")
	}
	if at := queueDeadline(map[topology.Unit]*queueUnit{{}: {}}); !at.IsZero() {
		t.Errorf("queue deadline with nothing waiting %v, want none", at)
	}
}

func TestGroupUseIdleSince(t *testing.T) {
	t.Parallel()
	u := newGroupUse(testStart)
	u.touch(testStart.Add(time.Second), 100*time.Millisecond)
	u.touch(testStart.Add(time.Second), 0) // not a join: the longest session stays
	last := testStart.Add(time.Second)
	tests := []struct {
		now  time.Time
		idle time.Duration
		want bool
	}{
		{last.Add(49 * time.Millisecond), 50 * time.Millisecond, false},
		{last.Add(99 * time.Millisecond), 50 * time.Millisecond, false}, // within the session
		{last.Add(100 * time.Millisecond), 50 * time.Millisecond, true},
		{last.Add(time.Hour - tick), time.Hour, false},
		{last.Add(time.Hour), time.Hour, true},
	}
	for _, tt := range tests {
		if got := u.idleSince(tt.now, tt.idle); got != tt.want {
			t.Errorf("%v after the last request, idle %v: %v, want %v", tt.now.Sub(last), tt.idle, got, tt.want)
		}
	}
}
