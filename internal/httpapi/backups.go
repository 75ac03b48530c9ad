package httpapi

import (
	"errors"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/backup"
)

func backupView(m backup.Manifest) api.Backup {
	return api.Backup{Dump: m.Dump, Version: m.Version, Time: m.Time, Trigger: m.Trigger, TargetVersion: m.TargetVersion,
		DatabaseSize: m.DatabaseSize, DumpSize: m.DumpSize, SHA256: m.SHA256}
}

func (a *API) backupsConfigured() error {
	if a.cfg.Backup.Dir == "" || a.cfg.Backup.DatabaseURL == "" {
		return errorf(http.StatusServiceUnavailable, "backups_not_configured", "this control plane has no backup destination")
	}
	return nil
}

func (a *API) listBackups(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if err := a.backupsConfigured(); err != nil {
		return 0, nil, err
	}
	ms, err := backup.List(a.cfg.Backup.Dir)
	if err != nil {
		return 0, nil, err
	}
	out := make([]api.Backup, 0, len(ms))
	for _, m := range ms {
		out = append(out, backupView(m))
	}
	return http.StatusOK, out, nil
}

func (a *API) createBackup(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if err := a.backupsConfigured(); err != nil {
		return 0, nil, err
	}
	cfg := a.cfg.Backup
	cfg.Now, cfg.Logger = a.cfg.Now, a.logger
	m, err := backup.CreateExclusive(r.Context(), a.pool, cfg, backup.TriggerManual)
	if errors.Is(err, backup.ErrBusy) {
		return 0, nil, errorf(http.StatusConflict, "backup_in_progress", "a backup is being taken: wait for it to finish")
	}
	if err != nil {
		a.logger.Error("manual control-plane backup failed", "err", err, "request_id", requestID(r.Context()))
		var ae *apiError
		if errors.As(err, &ae) {
			return 0, nil, err
		}
		// The cause (a path, pg_dump's output) is in the server's log, not
		// in the answer.
		return 0, nil, errorf(http.StatusInternalServerError, "backup_failed", "the backup failed: see the control plane's log (request %s)", requestID(r.Context()))
	}
	a.logger.Info("manual control-plane backup", "dump", m.Dump, "actor", c.actor.Name, "request_id", requestID(r.Context()))
	return http.StatusCreated, backupView(m), nil
}
