// Package flagenv lets environment variables set command-line flags, so
// every warmpath binary can be configured the way containers usually are.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Name returns the variable that sets flag name: prefix + the name upper-
// cased with dashes as underscores (prefix "WARMPATH_ROUTER_" and
// "max-retries" give WARMPATH_ROUTER_MAX_RETRIES).
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs whose variable is present in the
// environment. Call it before fs.Parse, so command-line flags still win.
func Apply(fs *flag.FlagSet, prefix string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := Name(prefix, f.Name)
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}
