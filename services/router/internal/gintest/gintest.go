// Package gintest runs the router's test binaries that build a proxy with
// gin in test mode. gin's mode is process-wide and proxy.New leaves it to
// its caller (the router's main sets release mode); without this, gin's
// default debug mode prints every route each test registers.
package gintest

import (
	"os"
	"testing"

	"github.com/gin-gonic/gin"
)

// Main is a test binary's TestMain: gin in test mode, then the tests.
func Main(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}
