package selfupdate

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nebulactrl/nebulactrl/transport"
)

// stepError is a failed step.
type stepError struct {
	step int
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }

func fail(step int, format string, args ...any) error {
	return &stepError{step: step, err: fmt.Errorf(format, args...)}
}

// Upgrade runs the six steps for cmd and reports with report: after step 5
// (ok), or at the step that failed (nothing changed). After a success it
// waits for the agent's running work and calls Exit. One upgrade at a time.
func (u *Updater) Upgrade(ctx context.Context, cmd transport.AgentUpgrade, report func(transport.AgentUpgradeResult)) {
	res := transport.AgentUpgradeResult{ID: cmd.ID, Version: cmd.Version}
	if err := u.begin(cmd); err != nil {
		res.Error = err.Error()
		u.cfg.Logger.Warn("agent upgrade refused", "version", cmd.Version, "err", err)
		report(res)
		return
	}
	defer func() {
		u.mu.Lock()
		u.running = false
		u.mu.Unlock()
	}()
	u.cfg.Logger.Info("upgrading the agent", "from", u.cfg.Version, "to", cmd.Version)
	err := u.replace(ctx, cmd)
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			res.Step = se.step
		}
		res.Error = err.Error()
		u.mu.Lock()
		rec := u.recordOrNew()
		rec.ID, rec.From, rec.To = cmd.ID, u.cfg.Version, cmd.Version
		rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeFailed, truncate(err.Error(), 500), u.cfg.Clock.Now().UTC(), 0
		if werr := u.write(rec); werr != nil {
			u.cfg.Logger.Warn("recording a failed upgrade", "err", werr)
		}
		u.mu.Unlock()
		u.cfg.Logger.Error("agent upgrade failed; nothing changed", "to", cmd.Version, "step", res.Step, "err", err)
		report(res)
		return
	}
	res.OK, res.Step = true, transport.UpgradeStepReplace
	report(res)
	u.stop("report")
	// Step 6: the running work finishes first.
	u.cfg.Logger.Info("agent binary replaced; restarting when the running work is done", "to", cmd.Version)
	limit := u.cfg.Clock.After(u.cfg.DrainLimit)
	for u.busy() {
		select {
		case <-limit:
			u.cfg.Logger.Warn("running work not done within the limit; restarting all the same", "limit", u.cfg.DrainLimit)
			u.cfg.Exit("upgraded")
			return
		case <-ctx.Done():
			// The agent stops anyway: its supervisor starts the new binary.
			return
		case <-time.After(u.cfg.PollBusy):
		}
	}
	u.cfg.Exit("upgraded")
}

// begin checks that the upgrade may start, and marks it running.
func (u *Updater) begin(cmd transport.AgentUpgrade) error {
	if ok, why := u.Can(); !ok {
		return fmt.Errorf("this agent cannot upgrade itself: %s", why)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.running:
		return errors.New("an upgrade is already under way")
	case u.probation:
		return fmt.Errorf("version %s is still on probation: it upgrades once it has been kept", u.cfg.Version)
	case cmd.Version == u.cfg.Version:
		return fmt.Errorf("this agent already runs version %s", cmd.Version)
	case len(cmd.SHA256) != 64 || strings.Trim(strings.ToLower(cmd.SHA256), "0123456789abcdef") != "":
		return errors.New("the command's SHA-256 is not 64 hexadecimal digits")
	case cmd.Version == "" || len(cmd.Version) > 64 || strings.ContainsAny(cmd.Version, " \t\r\n/\\"):
		return errors.New("the command's version is not a version")
	}
	if u.rec != nil && !cmd.Force {
		if until, ok := u.rec.Refused[cmd.Version]; ok && u.cfg.Clock.Now().Before(until) {
			return fmt.Errorf("version %s was rolled back (%s); it is not installed again before %s unless forced",
				cmd.Version, u.rec.Reason, until.UTC().Format(time.RFC3339))
		}
	}
	u.running = true
	return nil
}

// replace runs steps 1 to 5.
func (u *Updater) replace(ctx context.Context, cmd transport.AgentUpgrade) error {
	dir := filepath.Dir(u.cfg.Binary)
	// Step 1: download beside the binary, hashing while reading.
	tmp, err := os.CreateTemp(dir, u.tmpPattern())
	if err != nil {
		return fail(transport.UpgradeStepDownload, "creating the download beside %s: %v", u.cfg.Binary, err)
	}
	name := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = os.Remove(name)
		}
	}()
	sum, err := u.download(ctx, tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fail(transport.UpgradeStepDownload, "writing the download: %v", cerr)
	}
	if err != nil {
		return err
	}
	// Step 2: the hash.
	want, _ := hex.DecodeString(strings.ToLower(cmd.SHA256))
	if subtle.ConstantTimeCompare(sum, want) != 1 {
		return fail(transport.UpgradeStepChecksum, "the download's SHA-256 is %x, the command says %s: deleted, nothing changed", sum, strings.ToLower(cmd.SHA256))
	}
	u.stop("checksum")
	// Step 3: the new binary says its version.
	if err := os.Chmod(name, 0o755); err != nil {
		return fail(transport.UpgradeStepVersion, "making the download executable: %v", err)
	}
	got, err := runVersion(ctx, name)
	if err != nil {
		return fail(transport.UpgradeStepVersion, "running the new binary with --version: %v (a wrong architecture or a corrupt file)", err)
	}
	if got != cmd.Version {
		return fail(transport.UpgradeStepVersion, "the new binary says it is version %q, the command says %q", truncate(got, 80), cmd.Version)
	}
	u.stop("version")
	// Step 4: keep the running binary, record the upgrade.
	if err := u.keepPrev(); err != nil {
		return fail(transport.UpgradeStepKeep, "keeping %s: %v", u.prev(), err)
	}
	u.mu.Lock()
	rec := u.recordOrNew()
	rec.ID, rec.From, rec.To = cmd.ID, u.cfg.Version, cmd.Version
	rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeProbation, "", u.cfg.Clock.Now().UTC(), 0
	err = u.write(rec)
	u.mu.Unlock()
	if err != nil {
		return fail(transport.UpgradeStepKeep, "writing %s: %v", u.recordPath(), err)
	}
	u.stop("keep")
	// Step 5: one atomic rename.
	if err := os.Rename(name, u.cfg.Binary); err != nil {
		u.mu.Lock()
		rec.State, rec.Reason = transport.UpgradeFailed, "replacing the binary: "+err.Error()
		_ = u.write(rec)
		u.mu.Unlock()
		return fail(transport.UpgradeStepReplace, "replacing %s: %v", u.cfg.Binary, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		u.cfg.Logger.Warn("syncing the binary's directory", "err", err)
	}
	u.stop("replace")
	return nil
}

// download writes the control plane's agent binary for this architecture
// to f and returns its SHA-256.
func (u *Updater) download(ctx context.Context, f *os.File) ([]byte, error) {
	url := strings.TrimRight(u.cfg.URL, "/") + transport.DownloadPath + u.cfg.Arch
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "download URL: %v", err)
	}
	u.mu.Lock()
	cred := u.cfg.Credential
	u.mu.Unlock()
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := u.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return nil, fail(transport.UpgradeStepDownload, "downloading %s: %s: %s", url, e.Error.Code, e.Error.Message)
		}
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %s", url, resp.Status)
	}
	h := sha256.New()
	w := io.MultiWriter(f, h)
	body := io.LimitReader(resp.Body, MaxBinary+1)
	var n0 int64
	if u.failpoint == "download" {
		var err error
		if n0, err = io.CopyN(w, body, 1<<20); err == nil && f.Sync() == nil {
			u.stop("download")
		}
	}
	n, err := io.Copy(w, body)
	n += n0
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %v after %d bytes", url, err, n)
	}
	if n > MaxBinary {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: larger than %d bytes", url, MaxBinary)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %d of %d bytes (truncated)", url, n, resp.ContentLength)
	}
	if err := f.Sync(); err != nil {
		return nil, fail(transport.UpgradeStepDownload, "writing the download: %v", err)
	}
	return h.Sum(nil), nil
}

// runVersion runs bin --version and returns what it printed, trimmed. A
// file just written can be "busy" for a moment (a fork elsewhere in the
// process held its descriptor): that is tried again.
func runVersion(ctx context.Context, bin string) (string, error) {
	var lastErr error
	for range 20 {
		vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(vctx, bin, "--version").Output()
		cancel()
		if err == nil {
			return strings.TrimSpace(string(out)), nil
		}
		lastErr = err
		if !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ee *exec.ExitError
	if errors.As(lastErr, &ee) && len(ee.Stderr) > 0 {
		return "", fmt.Errorf("%v: %s", lastErr, truncate(strings.TrimSpace(string(ee.Stderr)), 200))
	}
	return "", lastErr
}

// keepPrev makes <binary>.prev the running binary: a hard link, or a copy
// (synced, then renamed) where links are not possible.
func (u *Updater) keepPrev() error {
	if err := os.Remove(u.prev()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(u.cfg.Binary, u.prev()); err == nil {
		return syncDir(filepath.Dir(u.cfg.Binary))
	}
	in, err := os.Open(u.cfg.Binary)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(u.prevTmp(), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(u.prevTmp(), u.prev()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(u.cfg.Binary))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
