package van

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
)

// receiveLoop receives and handles messages until the van stops. If the
// watchdog hands the loop to a new goroutine while this one is in a data
// handler, this one ends when the handler returns.
func (v *Van) receiveLoop() {
	if v.receive() {
		close(v.recvDone)
	}
}

// receive is the receive loop; it reports false when it has handed the loop
// over rather than stopped.
func (v *Van) receive() bool {
	for {
		ident, frames, err := v.tr.Recv()
		if err != nil {
			if errors.Is(err, ErrRecvTimeout) {
				if v.stopping.Load() {
					return true
				}
				continue
			}
			if errors.Is(err, ErrClosed) {
				return true
			}
			v.log.Error().Err(err).Msg("receive failed")
			if v.stopping.Load() {
				return true
			}
			continue
		}
		msg, err := v.decode(ident, frames)
		if err != nil {
			v.log.Warn().Err(err).Msg("dropping a malformed message")
			continue
		}
		if d := v.dropRate.Load(); d > 0 && v.IsReady() && msg.Meta.Control.Cmd != message.CmdTerminate && v.rng.IntN(100) < int(d) {
			v.log.Debug().Str("msg", msg.String()).Msg("dropping a message (PS_DROP_MSG)")
			continue
		}
		if r := v.res.Load(); r != nil {
			ack, drop := r.r.Incoming(msg)
			if ack != nil {
				// Never wait here: an ACK that cannot be queued is dropped,
				// and the peer's resend is acknowledged later.
				if _, err := v.trySend(ack); err != nil {
					v.log.Debug().Err(err).Int32("to", msg.Meta.Sender).Msg("ACK not sent")
				}
			}
			if drop {
				if msg.Meta.Control.Cmd != message.CmdAck {
					v.log.Debug().Str("msg", msg.String()).Msg("dropping a duplicate")
				}
				continue
			}
		}
		if e := v.log.Trace(); e.Enabled() {
			e.Str("msg", msg.String()).Msg("received")
		}
		if msg.Meta.IsControl() {
			if msg.Meta.Control.Cmd == message.CmdTerminate {
				if v.stopping.Load() {
					return true
				}
				v.log.Warn().Str("msg", msg.String()).Msg("ignoring TERMINATE while not stopping")
				continue
			}
			v.step(func(c *control.Core, now time.Time) []control.Output { return c.Step(msg, now) })
			continue
		}
		if msg.Meta.Sender == emptyID || msg.Meta.AppID == emptyID {
			v.log.Warn().Str("msg", msg.String()).Msg("dropping a data message from an unknown sender or without app id")
			continue
		}
		if !v.dispatch(msg) {
			return false
		}
	}
}

// dispatch passes a data message to the handler and reports whether this
// goroutine still runs the receive loop afterwards.
func (v *Van) dispatch(msg *message.Message) bool {
	v.handlerSince.Store(time.Now().UnixNano())
	seq := v.inHandler.Add(1) // odd: in the handler
	v.handler.HandleData(msg)
	if !msg.Meta.Request {
		// A response usually readies the goroutine waiting for it. Yield,
		// so that it runs on this thread now instead of waiting for another
		// thread to wake while this one blocks in the next receive.
		runtime.Gosched()
	}
	return v.inHandler.CompareAndSwap(seq, seq+1)
}

// watchHandlers hands the receive loop to a new goroutine whenever a data
// handler has run for HandlerStall, so that a slow handler (or one waiting
// for a message only the loop can receive) never stalls receiving, until
// the loop stops. It measures real time: it is about responsiveness, not
// the protocol.
func (v *Van) watchHandlers() {
	tick := time.NewTicker(HandlerStall / 2)
	defer tick.Stop()
	for {
		select {
		case <-v.recvDone:
			return
		case <-tick.C:
		}
		seq := v.inHandler.Load()
		if seq%2 == 0 || time.Since(time.Unix(0, v.handlerSince.Load())) < HandlerStall {
			continue
		}
		if v.inHandler.CompareAndSwap(seq, seq+1) {
			v.log.Debug().Msg("a data handler is taking long: receiving on a new goroutine")
			go v.receiveLoop()
		}
	}
}

func (v *Van) decode(ident []byte, frames [][]byte) (*message.Message, error) {
	if len(frames) < 1 {
		return nil, errors.New("no meta frame")
	}
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	v.recvBytes.Add(n + int64(len(ident)))
	meta, err := message.Decode(frames[0])
	if err != nil {
		return nil, err
	}
	meta.Sender = ParseIdentity(ident)
	meta.Recver = v.MyNode().ID
	msg := &message.Message{Meta: meta, Data: frames[1:]}
	if len(msg.Data) > 0 && len(meta.DataTypes) != len(msg.Data) {
		return nil, fmt.Errorf("%d data frames but %d data types", len(msg.Data), len(meta.DataTypes))
	}
	return msg, nil
}
