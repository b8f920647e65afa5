package control

import (
	"bytes"

	"github.com/gopslite/pslite/message"
)

// NoticePrefix starts the body of a HEARTBEAT that carries a notice. C++
// ps-lite reads only the nodes a HEARTBEAT lists and ignores its body, so
// a notice with no nodes is a no-op for a C++ peer.
const NoticePrefix = "pslite:"

// NoticeKind says what a notice announces.
type NoticeKind string

// Notice kinds. The strings are part of the protocol between Go nodes.
const (
	// NoticeAbort, from the scheduler: the job has failed; the text says
	// why.
	NoticeAbort NoticeKind = "abort"
	// NoticeLeave, to the scheduler: the sender stops of its own accord
	// (Finalize without a final barrier); its connection closing next is
	// no fault.
	NoticeLeave NoticeKind = "leave"
)

// NewNotice returns a HEARTBEAT to recver carrying a notice.
func NewNotice(recver int, kind NoticeKind, text string, timestamp int32) *message.Message {
	msg := message.New()
	msg.Meta.Recver = int32(recver)
	msg.Meta.Control.Cmd = message.CmdHeartbeat
	body := NoticePrefix + string(kind)
	if text != "" {
		body += " " + text
	}
	msg.Meta.Body = []byte(body)
	msg.Meta.Timestamp = timestamp
	return msg
}

// ParseNotice returns the notice a HEARTBEAT carries; ok is false for a
// plain heartbeat.
func ParseNotice(msg *message.Message) (kind NoticeKind, text string, ok bool) {
	if msg.Meta.Control.Cmd != message.CmdHeartbeat {
		return "", "", false
	}
	body, found := bytes.CutPrefix(msg.Meta.Body, []byte(NoticePrefix))
	if !found {
		return "", "", false
	}
	k, t, _ := bytes.Cut(body, []byte{' '})
	return NoticeKind(k), string(t), true
}
