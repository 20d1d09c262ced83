package replica

import (
	"context"
	"fmt"
	"log/slog"

	"go.etcd.io/raft/v3"
)

// NewLogger returns a raft.Logger writing to l: raft's errors at error
// level, its warnings at warn, the rest (elections, votes: many lines a
// second with thousands of groups) at debug. A line is formatted only
// when its level is on. With l nil, everything below a panic is dropped.
func NewLogger(l *slog.Logger) raft.Logger { return raftLogger{l: l} }

type raftLogger struct{ l *slog.Logger }

func (r raftLogger) log(level slog.Level, format string, args []any) {
	if r.l == nil || !r.l.Enabled(context.Background(), level) {
		return
	}
	var msg string
	if format == "" {
		msg = fmt.Sprint(args...)
	} else {
		msg = fmt.Sprintf(format, args...)
	}
	r.l.Log(context.Background(), level, msg, "component", "raft")
}

func (r raftLogger) Debug(v ...any)                 { r.log(slog.LevelDebug, "", v) }
func (r raftLogger) Debugf(format string, v ...any) { r.log(slog.LevelDebug, format, v) }
func (r raftLogger) Info(v ...any)                  { r.log(slog.LevelDebug, "", v) }
func (r raftLogger) Infof(format string, v ...any)  { r.log(slog.LevelDebug, format, v) }
func (r raftLogger) Warning(v ...any)               { r.log(slog.LevelWarn, "", v) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.log(slog.LevelWarn, format, v)
}
func (r raftLogger) Error(v ...any)                 { r.log(slog.LevelError, "", v) }
func (r raftLogger) Errorf(format string, v ...any) { r.log(slog.LevelError, format, v) }
func (r raftLogger) Fatal(v ...any)                 { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any) { r.Panicf(format, v...) }
func (r raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	r.log(slog.LevelError, "", []any{msg})
	panic(msg)
}
func (r raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	r.log(slog.LevelError, "", []any{msg})
	panic(msg)
}
