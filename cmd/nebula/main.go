// Command nebula is the NebulaCtrl control plane (nebula serve) and its
// command-line client. Installed as nebulactrl-server it also answers the
// installer's pre-upgrade-backup.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is set at build time: -ldflags "-X main.version=1.5.0".
var version = "dev"

// exitError carries an exit code through run.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nebula:", err)
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	// --version prints the bare version, for scripts and the upgrade checks.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, c.App.Version) }
	app := &cli.App{
		Name:      "nebula",
		Usage:     "the NebulaCtrl deployment control plane and its client",
		UsageText: "nebula [global options] command [subcommand] [options] [arguments]",
		Version:   version,
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "env-file", Value: ".env", Usage: "read NEBULACTRL_* settings from this file (the environment wins)", EnvVars: []string{"NEBULACTRL_ENV_FILE"}},
			contextFlag(), yesFlag(),
		}, outputFlags()...),
		// Unknown commands: "did you mean", exit code 2 (clientcmd.go).
		Action:               unknownCommand,
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			serveCommand(),
			logsCommand(),
			auditCommand(),
			setupCommand(),
			loginCommand(),
			logoutCommand(),
			whoamiCommand(),
			orgCommand(),
			memberCommand(),
			userCommand(),
			projectCommand(),
			envCommand(),
			serviceCommand(),
			varCommand(),
			domainCommand(),
			clusterCommand(),
			deployCommand(),
			buildsCommand(),
			rollbackCommand(),
			releasesCommand(),
			deploymentsCommand(),
			changesetCommand(),
			stateCommand(),
			tokenCommand(),
			settingsCommand(),
			backupCommand(),
			secretKeyCommand(),
			contextCommand(),
			serverCommand(),
			meshCommand(),
			webhookCommand(),
			completionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	if len(args) > 0 {
		serverApp(app, args[0])
	}
	uniformUsage(app)
	return app.RunContext(ctx, args)
}
