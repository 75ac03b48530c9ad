package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// bashCompletion asks nebula itself for the words that may follow (urfave/cli's
// --generate-bash-completion): commands, subcommands and flags.
const bashCompletion = `# bash completion for nebula: source <(nebula completion bash)
_nebula_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    opts=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" "${cur}" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  fi
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _nebula_complete nebula
`

const zshCompletion = `#compdef nebula
# zsh completion for nebula: source <(nebula completion zsh), or save it as
# _nebula in a directory of $fpath.
_nebula() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
if [[ "$funcstack[1]" == "_nebula" ]]; then
  _nebula "$@"
else
  compdef _nebula nebula
fi
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints a script that completes nebula's commands, subcommands and flags in
the shell. Load it in the running shell, or install it for every new one.

Example:
   source <(nebula completion bash)      # or into ~/.bashrc, or /etc/bash_completion.d/nebula
   source <(nebula completion zsh)       # or save as _nebula in a directory of $fpath
   nebula completion fish > ~/.config/fish/completions/nebula.fish`,
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("want bash, zsh or fish, got %d argument(s) (see nebula completion --help)", c.NArg())
			}
			switch shell := c.Args().First(); shell {
			case "bash":
				_, err := fmt.Fprint(c.App.Writer, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(c.App.Writer, zshCompletion)
				return err
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(c.App.Writer, s)
				return err
			default:
				return usagef("no completion for %q: want bash, zsh or fish", shell)
			}
		},
	}
}
