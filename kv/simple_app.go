package kv

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gopslite/pslite/customer"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// SimpleData is a SimpleApp request or response as the handler sees it.
type SimpleData struct {
	Head       int
	Body       string
	Sender     int
	Timestamp  int
	CustomerID int
}

// SimpleHandle handles a SimpleApp request or response.
type SimpleHandle func(d SimpleData, app *SimpleApp)

// SimpleApp sends an int head and a string body to a node or a group and
// collects the responses. By default a request is answered with an empty
// response and responses are ignored.
type SimpleApp struct {
	po        *postoffice.Postoffice
	cust      *customer.Customer
	reqHandle atomic.Pointer[SimpleHandle]
	resHandle atomic.Pointer[SimpleHandle]
}

// NewSimpleApp registers a SimpleApp as customer (appID, customerID). The
// app holds the messages that reach it (also those that arrived before it
// existed) until a handle is set, it sends a request, or the node
// finalizes, so that the handles set right after NewSimpleApp see every
// message.
func NewSimpleApp(po *postoffice.Postoffice, appID, customerID int) (*SimpleApp, error) {
	a := newSimpleApp(po)
	if err := a.register(appID, customerID, a.process); err != nil {
		return nil, err
	}
	return a, nil
}

func newSimpleApp(po *postoffice.Postoffice) *SimpleApp {
	a := &SimpleApp{po: po}
	a.SetRequestHandle(func(d SimpleData, app *SimpleApp) { _ = app.Response(d, "") })
	a.SetResponseHandle(func(SimpleData, *SimpleApp) {})
	return a
}

// register creates the app's customer, paused: the caller resumes it once
// the app is complete (a.cust set, handlers in place), so that no message,
// not even one held for the customer before it existed, meets a half-built
// app.
func (a *SimpleApp) register(appID, customerID int, h customer.Handler, opts ...customer.Option) error {
	if a.po == nil {
		return fmt.Errorf("kv: nil postoffice")
	}
	c, err := a.po.NewCustomer(appID, customerID, h, append(opts, customer.StartPaused())...)
	if err != nil {
		return err
	}
	// The apps here keep no message once handled (a SimpleApp copies what
	// its handles see; KV handles see data frames, never the message).
	c.SetRecycles(true)
	a.cust = c
	return nil
}

// SetRequestHandle sets the function that answers requests; it must call
// Response (now or later) for each request. It may be called at any time.
func (a *SimpleApp) SetRequestHandle(h SimpleHandle) {
	if h != nil {
		a.reqHandle.Store(&h)
		a.resume()
	}
}

// SetResponseHandle sets the function called for each response. It may be
// called at any time.
func (a *SimpleApp) SetResponseHandle(h SimpleHandle) {
	if h != nil {
		a.resHandle.Store(&h)
		a.resume()
	}
}

// resume lets the app's customer handle messages (see NewSimpleApp).
func (a *SimpleApp) resume() {
	if a.cust != nil {
		a.cust.Resume()
	}
}

// Customer returns the app's customer.
func (a *SimpleApp) Customer() *customer.Customer { return a.cust }

// Postoffice returns the node the app runs on.
func (a *SimpleApp) Postoffice() *postoffice.Postoffice { return a.po }

// Request sends head and body to every node that recv (a node or group id)
// addresses, and returns the timestamp to wait on.
func (a *SimpleApp) Request(head int, body string, recv int) (int, error) {
	ids, err := a.po.GetNodeIDs(recv)
	if err != nil {
		return 0, err
	}
	ts, err := a.cust.NewRequest(len(ids))
	if err != nil {
		return 0, err
	}
	a.resume()
	for _, id := range ids {
		msg := message.New()
		msg.Meta.Head = int32(head)
		msg.Meta.Body = []byte(body)
		msg.Meta.Timestamp = int32(ts)
		msg.Meta.Request = true
		msg.Meta.SimpleApp = true
		msg.Meta.AppID = int32(a.cust.AppID())
		msg.Meta.CustomerID = int32(a.cust.CustomerID())
		msg.Meta.Recver = int32(id)
		if err := a.po.Send(msg); err != nil {
			err = fmt.Errorf("kv: request to node %d: %w", id, err)
			a.cust.Tracker().Fail(ts, err)
			return ts, err
		}
	}
	return ts, nil
}

// Response answers the request req with body.
func (a *SimpleApp) Response(req SimpleData, body string) error {
	msg := message.New()
	msg.Meta.Head = int32(req.Head)
	msg.Meta.Body = []byte(body)
	msg.Meta.Timestamp = int32(req.Timestamp)
	msg.Meta.Request = false
	msg.Meta.SimpleApp = true
	msg.Meta.AppID = int32(a.cust.AppID())
	msg.Meta.CustomerID = int32(req.CustomerID)
	msg.Meta.Recver = int32(req.Sender)
	return a.po.Send(msg)
}

// Wait blocks until the request ts has all its responses.
func (a *SimpleApp) Wait(ts int) error { return a.cust.WaitRequest(ts) }

// WaitContext is Wait that gives up when ctx is done.
func (a *SimpleApp) WaitContext(ctx context.Context, ts int) error {
	return a.cust.WaitRequestContext(ctx, ts)
}

// Close unregisters the app's customer and stops it.
func (a *SimpleApp) Close() {
	if a.cust != nil {
		a.po.RemoveCustomer(a.cust)
	}
}

func (a *SimpleApp) process(msg *message.Message) {
	d := SimpleData{
		Head:       int(msg.Meta.Head),
		Body:       string(msg.Meta.Body),
		Sender:     int(msg.Meta.Sender),
		Timestamp:  int(msg.Meta.Timestamp),
		CustomerID: int(msg.Meta.CustomerID),
	}
	if msg.Meta.Request {
		(*a.reqHandle.Load())(d, a)
	} else {
		(*a.resHandle.Load())(d, a)
	}
}
