package app

import (
	"os"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestMain puts gin in test mode, as the router's main puts it in release
// mode: New leaves the process-wide mode to its caller, and gin's default,
// debug, would print every route the tests register.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}
