package agentlink

import (
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/transport"
)

// upgradeFacts carries the hello's facts.agentUpgrade into the connection's
// record, bounded: the server's stream learns from it an upgrade's rollback
// (or failure) that the control plane was not connected for.
func upgradeFacts(f *transport.UpgradeFacts) *domain.UpgradeFacts {
	if f == nil {
		return nil
	}
	return &domain.UpgradeFacts{From: truncateUTF8(f.From, 64), To: truncateUTF8(f.To, 64), State: truncateUTF8(f.State, 40),
		Reason: truncateUTF8(f.Reason, 1000), At: f.At}
}
