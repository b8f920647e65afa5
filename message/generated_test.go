package message

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/gopslite/pslite/message/pb"
)

// The generated code's reading of a meta, which Decode must match
// (FuzzDecodeFast, FuzzDecode).

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
