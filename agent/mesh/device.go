package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// Modes of the interface (Config.Mode).
const (
	// ModeAuto uses kernel WireGuard when the module exists, else
	// wireguard-go.
	ModeAuto = "auto"
	// ModeKernel requires the kernel module.
	ModeKernel = "kernel"
	// ModeUserspace always runs wireguard-go in this process.
	ModeUserspace = "userspace"
)

// DefaultMTU leaves room for WireGuard's overhead on a 1500-byte link.
const DefaultMTU = 1420

// iface is the node's WireGuard interface.
type iface struct {
	name      string
	userspace bool
	close     func()
}

// openInterface creates the interface name (replacing one a previous run
// left behind): a kernel WireGuard link, or a TUN driven by wireguard-go
// with its UAPI socket in /var/run/wireguard, where wgctrl finds it. Either
// way wgctrl configures it.
func openInterface(name, mode string, log *slog.Logger) (*iface, error) {
	if l, err := netlink.LinkByName(name); err == nil {
		if l.Type() == "wireguard" && mode != ModeUserspace {
			return &iface{name: name, close: func() {}}, nil
		}
		// A TUN a killed run left, or a link of another kind by the name.
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("mesh: removing the stale interface %s: %w", name, err)
		}
	}
	if mode != ModeUserspace {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = name, DefaultMTU
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la})
		if err == nil {
			return &iface{name: name, close: func() {
				if l, err := netlink.LinkByName(name); err == nil {
					_ = netlink.LinkDel(l)
				}
			}}, nil
		}
		if mode == ModeKernel {
			return nil, fmt.Errorf("mesh: creating the kernel WireGuard interface %s: %w", name, err)
		}
		log.Info("no kernel WireGuard here; running wireguard-go", "interface", name, "reason", err)
	}
	return openUserspace(name, log)
}

func openUserspace(name string, log *slog.Logger) (*iface, error) {
	tdev, err := tun.CreateTUN(name, DefaultMTU)
	if err != nil {
		return nil, fmt.Errorf("mesh: creating the TUN interface %s (is /dev/net/tun there, and NET_ADMIN granted?): %w", name, err)
	}
	uapiFile, err := ipc.UAPIOpen(name)
	if err != nil {
		tdev.Close()
		return nil, fmt.Errorf("mesh: opening the UAPI socket of %s: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(string, ...any) {},
		Errorf: func(format string, args ...any) {
			log.Warn("wireguard-go: "+fmt.Sprintf(format, args...), "interface", name)
		},
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), logger)
	uapi, err := ipc.UAPIListen(name, uapiFile)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("mesh: listening on the UAPI socket of %s: %w", name, err)
	}
	go func() {
		for {
			c, err := uapi.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Debug("UAPI socket closed", "err", err)
				}
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	return &iface{name: name, userspace: true, close: func() {
		uapi.Close()
		dev.Close()
	}}, nil
}
