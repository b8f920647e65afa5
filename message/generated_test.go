package message

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/gopslite/pslite/message/pb"
)

// The generated code's reading of a meta, which Decode must match
// (FuzzDecodeFast, FuzzDecode), and its writing, which Encode must match
// (TestEncodeMatchesGenerated).

// toPB converts a meta for the generated code to write.
func toPB(m *Meta) *pb.PBMeta {
	p := &pb.PBMeta{
		Head:       proto.Int32(m.Head),
		Push:       proto.Bool(m.Push),
		Pull:       proto.Bool(m.Pull),
		Request:    proto.Bool(m.Request),
		SimpleApp:  proto.Bool(m.SimpleApp),
		Priority:   proto.Int32(m.Priority),
		CustomerId: proto.Int32(m.CustomerID),
		DataSize:   proto.Int32(m.DataSize),
	}
	if m.AppID != Empty {
		p.AppId = proto.Int32(m.AppID)
	}
	if m.Timestamp != Empty {
		p.Timestamp = proto.Int32(m.Timestamp)
	}
	if len(m.Body) > 0 {
		p.Body = m.Body
	}
	if len(m.DataTypes) > 0 {
		p.DataType = make([]int32, len(m.DataTypes))
		for i, d := range m.DataTypes {
			p.DataType[i] = int32(d)
		}
	}
	if m.IsControl() {
		c := &pb.PBControl{Cmd: proto.Int32(int32(m.Control.Cmd))}
		switch m.Control.Cmd {
		case CmdBarrier:
			c.BarrierGroup = proto.Int32(m.Control.BarrierGroup)
		case CmdAck:
			c.MsgSig = proto.Uint64(m.Control.MsgSig)
		}
		for _, n := range m.Control.Nodes {
			c.Node = append(c.Node, &pb.PBNode{
				Id:         proto.Int32(n.ID),
				Role:       proto.Int32(int32(n.Role)),
				Port:       proto.Int32(n.Port),
				Hostname:   proto.String(n.Hostname),
				IsRecovery: proto.Bool(n.IsRecovery),
				CustomerId: proto.Int32(n.CustomerID),
			})
		}
		p.Control = c
	}
	return p
}

// decodeGenerated decodes any meta with the generated code.
func decodeGenerated(b []byte) (Meta, error) {
	var p pb.PBMeta
	if err := proto.Unmarshal(b, &p); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	m := Meta{
		Head:       p.GetHead(),
		AppID:      Empty,
		Timestamp:  Empty,
		CustomerID: p.GetCustomerId(),
		Sender:     Empty,
		Recver:     Empty,
		Request:    p.GetRequest(),
		Push:       p.GetPush(),
		Pull:       p.GetPull(),
		SimpleApp:  p.GetSimpleApp(),
		Body:       p.Body,
		DataSize:   p.GetDataSize(),
		Priority:   p.GetPriority(),
	}
	if p.AppId != nil {
		m.AppID = *p.AppId
	}
	if p.Timestamp != nil {
		m.Timestamp = *p.Timestamp
	}
	if len(p.DataType) > 0 {
		m.DataTypes = make([]DataType, len(p.DataType))
		for i, d := range p.DataType {
			if d < 0 || DataType(d) > Other {
				return Meta{}, fmt.Errorf("%w: unknown data type %d", ErrBadMeta, d)
			}
			m.DataTypes[i] = DataType(d)
		}
	}
	if c := p.Control; c != nil {
		m.Control.Cmd = Command(c.GetCmd())
		if m.Control.Cmd < CmdEmpty || m.Control.Cmd > CmdHeartbeat {
			return Meta{}, fmt.Errorf("%w: unknown control command %d", ErrBadMeta, c.GetCmd())
		}
		m.Control.BarrierGroup = c.GetBarrierGroup()
		m.Control.MsgSig = c.GetMsgSig()
		for _, pn := range c.Node {
			n := Node{
				Role:       Role(pn.GetRole()),
				ID:         Empty,
				Hostname:   pn.GetHostname(),
				Port:       pn.GetPort(),
				IsRecovery: pn.GetIsRecovery(),
				CustomerID: pn.GetCustomerId(),
			}
			if n.Role < RoleServer || n.Role > RoleScheduler {
				return Meta{}, fmt.Errorf("%w: unknown role %d", ErrBadMeta, pn.GetRole())
			}
			if pn.Id != nil {
				n.ID = *pn.Id
			}
			m.Control.Nodes = append(m.Control.Nodes, n)
		}
	}
	return m, nil
}
