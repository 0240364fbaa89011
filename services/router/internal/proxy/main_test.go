package proxy

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/internal/gintest"
)

func TestMain(m *testing.M) { gintest.Main(m) }
