//go:build linux && (amd64 || arm64)

package wal

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// An fsync run through io_uring: the kernel does it on a worker thread and
// posts the result, and the goroutine waiting for it parks instead of
// sitting in a system call. A goroutine in a blocking system call keeps
// its scheduler P until the Go runtime's monitor takes it back, which an
// fsync of a few milliseconds often beats, so with one P per CPU the CPUs
// idle while fsyncs hold the Ps; a parked goroutine holds none.
//
// Only what fsync needs: one ring per process, set up on first use; if
// the kernel refuses io_uring (too old, or forbidden) or BRAID_WAL_URING is
// "off", fsync is the plain system call.

const (
	sysIOURingSetup    = 425
	sysIOURingEnter    = 426
	sysIOURingRegister = 427

	iouringOffSQRing = 0
	iouringOffCQRing = 0x8000000
	iouringOffSQEs   = 0x10000000

	iouringOpFsync         = 3
	iouringFsyncDatasync   = 1 // sqe fsync_flags: fdatasync
	iouringRegisterEventFD = 4
	iouringFeatSingleMmap  = 1

	uringEntries = 128
	sqeSize      = 64
	cqeSize      = 16
)

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

type uring struct {
	fd     int
	sq, cq []byte // the mapped rings (the same mapping with single mmap)
	sqes   []byte
	params uringParams
	events *os.File // the eventfd the kernel signals per completion

	slots chan struct{} // one per submission the ring may hold

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan int32
}

var (
	ringOnce sync.Once
	ring     *uring // nil when io_uring is unavailable
)

// fdatasync is the plain system call, with os.File's error wrapping.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return f.Sync()
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = syscall.Fdatasync(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return f.Sync()
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// fsyncFile fdatasyncs f (see startFsync) through the ring, or with the
// plain system call when there is no ring.
func fsyncFile(f *os.File) error { return startFsync(f)() }

// startFsync submits an fdatasync of f through the ring and returns the
// wait for its result; without a ring the wait runs the plain system call.
// The caller keeps f open until the wait has returned.
//
// fdatasync, not fsync: it flushes the data and the metadata needed to
// read it back (the size, the block map), which is all a log needs; it
// skips the times, which otherwise cost a journal commit on every append.
func startFsync(f *os.File) func() error {
	if !ringInUse() {
		return func() error { return fdatasync(f) }
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return f.Sync // closed: Sync says so
	}
	var done chan int32
	if err := rc.Control(func(fd uintptr) { done = ring.submitFsync(int32(fd)) }); err != nil {
		return f.Sync // closed meanwhile: Sync says so in os's words
	}
	if done == nil {
		return func() error { return fdatasync(f) } // the ring refused it: the plain way
	}
	return func() error {
		res := <-done
		<-ring.slots
		if res < 0 {
			return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.Errno(-res)}
		}
		return nil
	}
}

// startFsyncs starts an fdatasync of each file, submitted through the
// ring together (one system call for as many as it has room for), and
// returns the waits for them, as startFsync does for one. The caller keeps
// the files open until the waits have returned.
func startFsyncs(files []*os.File) []func() error {
	waits := make([]func() error, len(files))
	if len(files) == 1 || !ringInUse() {
		for i, f := range files {
			waits[i] = startFsync(f)
		}
		return waits
	}
	fds := make([]int32, len(files))
	for i, f := range files {
		fds[i] = -1
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { fds[i] = int32(fd) })
		}
	}
	for k, done := range ring.submitFsyncs(fds) {
		f := files[k]
		if done == nil {
			waits[k] = func() error { return fdatasync(f) } // not taken: the plain way
			continue
		}
		waits[k] = func() error {
			res := <-done
			<-ring.slots
			if res < 0 {
				return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.Errno(-res)}
			}
			return nil
		}
	}
	return waits
}

// ringInUse reports whether fsyncs go through io_uring: not if the kernel
// refuses it, nor if the environment sets BRAID_WAL_URING=off.
func ringInUse() bool {
	ringOnce.Do(func() {
		if os.Getenv("BRAID_WAL_URING") != "off" {
			ring = newURing()
		}
	})
	return ring != nil
}

func newURing() *uring {
	r := &uring{slots: make(chan struct{}, uringEntries), waiting: map[uint64]chan int32{}}
	fd, _, errno := syscall.Syscall(sysIOURingSetup, uringEntries, uintptr(unsafe.Pointer(&r.params)), 0)
	if errno != 0 {
		return nil
	}
	r.fd = int(fd)
	fail := func() *uring {
		for _, m := range [][]byte{r.sq, r.cq, r.sqes} {
			if m != nil {
				_ = syscall.Munmap(m)
			}
		}
		_ = syscall.Close(r.fd)
		return nil
	}
	p := &r.params
	if p.features&iouringFeatSingleMmap == 0 {
		return fail() // kernels before 5.4; not worth a second mapping path
	}
	size := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*cqeSize)
	var err error
	if r.sq, err = syscall.Mmap(r.fd, iouringOffSQRing, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE); err != nil {
		return fail()
	}
	r.cq = r.sq
	if r.sqes, err = syscall.Mmap(r.fd, iouringOffSQEs, int(p.sqEntries)*sqeSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE); err != nil {
		return fail()
	}
	efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return fail()
	}
	efd32 := int32(efd)
	if _, _, errno := syscall.Syscall6(sysIOURingRegister, uintptr(r.fd), iouringRegisterEventFD, uintptr(unsafe.Pointer(&efd32)), 1, 0, 0); errno != 0 {
		_ = syscall.Close(int(efd))
		return fail()
	}
	// Non-blocking, so reads park in the runtime's poller.
	r.events = os.NewFile(efd, "io_uring-eventfd")
	go r.reap()
	return r
}

func (r *uring) u32(m []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

// submitFsync submits an fsync of fd and returns the channel its result
// (0 or -errno) arrives on, after which the caller gives its slot back
// (<-r.slots); nil when the ring did not take it.
func (r *uring) submitFsync(fd int32) chan int32 { return r.submitFsyncs([]int32{fd})[0] }

// submitFsyncs submits an fsync of each fd with one system call and
// returns the channels their results arrive on, as submitFsync does; an fd
// below zero, or one the ring did not take, gets nil. It waits for a free
// slot of the ring only while it holds none, and takes the others only if
// they are free: a caller holding slots while it waits for more could wait
// for ever on another doing the same, and the slots come back only as the
// caller waits for its results. The fds it has no slot for get nil.
func (r *uring) submitFsyncs(fds []int32) []chan int32 {
	dones := make([]chan int32, len(fds))
	take := make([]bool, len(fds))
	n := 0
	for i, fd := range fds {
		if fd < 0 {
			continue
		}
		if n == 0 {
			r.slots <- struct{}{}
		} else {
			select {
			case r.slots <- struct{}{}:
			default:
				continue
			}
		}
		take[i] = true
		n++
	}
	if n == 0 {
		return dones
	}
	r.mu.Lock()
	p := &r.params
	tail := atomic.LoadUint32(r.u32(r.sq, p.sqOff.tail))
	mask := atomic.LoadUint32(r.u32(r.sq, p.sqOff.ringMask))
	ids := make([]uint64, len(fds))
	next := tail
	for i, fd := range fds {
		if !take[i] {
			continue
		}
		r.nextID++
		ids[i] = r.nextID
		dones[i] = make(chan int32, 1)
		r.waiting[ids[i]] = dones[i]
		idx := next & mask
		sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
		clear(sqe)
		sqe[0] = iouringOpFsync
		*(*int32)(unsafe.Pointer(&sqe[4])) = fd
		*(*uint32)(unsafe.Pointer(&sqe[28])) = iouringFsyncDatasync
		*(*uint64)(unsafe.Pointer(&sqe[32])) = ids[i]
		*r.u32(r.sq, p.sqOff.array+idx*4) = idx
		next++
	}
	atomic.StoreUint32(r.u32(r.sq, p.sqOff.tail), next)
	// The kernel may take fewer entries than asked (it says how many);
	// ask again for the rest, a few times.
	head := tail
	for try := 0; try < 3 && head != next; try++ {
		if _, _, errno := syscall.Syscall6(sysIOURingEnter, uintptr(r.fd), uintptr(next-head), 0, 0, 0, 0); errno != 0 && errno != syscall.EINTR && errno != syscall.EAGAIN && errno != syscall.EBUSY {
			head = atomic.LoadUint32(r.u32(r.sq, p.sqOff.head))
			break
		}
		head = atomic.LoadUint32(r.u32(r.sq, p.sqOff.head))
	}
	if head != next {
		// The kernel took the entries before head; take the others back.
		atomic.StoreUint32(r.u32(r.sq, p.sqOff.tail), head)
		taken := head - tail
		k := uint32(0)
		for i := range fds {
			if dones[i] == nil {
				continue
			}
			if k >= taken {
				delete(r.waiting, ids[i])
				dones[i] = nil
				<-r.slots
			}
			k++
		}
	}
	r.mu.Unlock()
	return dones
}

// reap hands each completion to its waiter; it runs for the life of the
// process.
func (r *uring) reap() {
	var buf [8]byte
	p := &r.params
	for {
		if _, err := r.events.Read(buf[:]); err != nil {
			return
		}
		head := atomic.LoadUint32(r.u32(r.cq, p.cqOff.head))
		tail := atomic.LoadUint32(r.u32(r.cq, p.cqOff.tail))
		mask := atomic.LoadUint32(r.u32(r.cq, p.cqOff.ringMask))
		for ; head != tail; head++ {
			off := p.cqOff.cqes + (head&mask)*cqeSize
			id := *(*uint64)(unsafe.Pointer(&r.cq[off]))
			res := *(*int32)(unsafe.Pointer(&r.cq[off+8]))
			r.mu.Lock()
			done := r.waiting[id]
			delete(r.waiting, id)
			r.mu.Unlock()
			if done != nil {
				done <- res
			}
		}
		atomic.StoreUint32(r.u32(r.cq, p.cqOff.head), head)
	}
}
