package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// cliReference is docs/cli.md's CLI reference, made from the commands' own
// help (usage lines, descriptions, flags with their defaults) so that it
// cannot drift: TestCLIReference checks docs/cli.md holds it, and
// `make cli-docs` writes it there.
func cliReference(root *cobra.Command) string {
	var b strings.Builder
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" && c.Parent() == root {
			return
		}
		if c != root {
			fmt.Fprintf(&b, "#### `%s`\n\n%s\n\n", c.UseLine(), c.Short)
			if c.Example != "" {
				fmt.Fprintf(&b, "```sh\n%s\n```\n\n", strings.TrimRight(c.Example, "\n"))
			}
			if flags := c.LocalNonPersistentFlags().FlagUsages(); strings.TrimSpace(flags) != "" {
				fmt.Fprintf(&b, "```text\n%s```\n\n", flags)
			}
			if flags := c.PersistentFlags().FlagUsages(); c.HasSubCommands() && strings.TrimSpace(flags) != "" {
				fmt.Fprintf(&b, "Flags of every `%s` command:\n\n```text\n%s```\n\n", c.CommandPath(), flags)
			}
			if !c.HasSubCommands() && c.Parent() == root && strings.TrimSpace(c.PersistentFlags().FlagUsages()) != "" {
				fmt.Fprintf(&b, "Connection flags:\n\n```text\n%s```\n\n", c.PersistentFlags().FlagUsages())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	fmt.Fprintf(&b, "#### `braid completion bash|zsh|fish|powershell`\n\nprint a shell completion script (e.g. `source <(braid completion bash)`)\n")
	return b.String()
}
