package kvredis

import (
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestNewClientURLs(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		addrs   []string // the seeds, for a cluster
		tls     bool
		user    string
		pass    string
		err     string // a substring of the error, when it must fail
	}{
		{url: "redis://127.0.0.1:6379/0"},
		{url: "rediss://r.example:6380/1", tls: true},
		{url: "redis-cluster://a:7000", cluster: true, addrs: []string{"a:7000"}},
		{url: "redis-cluster://a:7000,b:7001,c:7002/", cluster: true, addrs: []string{"a:7000", "b:7001", "c:7002"}},
		{url: "redis-cluster://a:7000?addr=b:7001&dial_timeout=2s", cluster: true, addrs: []string{"a:7000", "b:7001"}},
		{url: "redis-cluster://u:p@a:7000,b:7001/0", cluster: true, addrs: []string{"a:7000", "b:7001"}, user: "u", pass: "p"},
		{url: "rediss-cluster://a:7000", cluster: true, addrs: []string{"a:7000"}, tls: true},
		{url: "redis-cluster://a:7000/3", err: "database 0 only"},
		{url: "redis-cluster://a:7000,,b:1", err: "empty seed"},
		{url: "redis-cluster://u:secret@a:7000?bogus=1", err: "u:xxxxx@a:7000"},
		{url: "http://a:7000", err: "invalid URL scheme"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := NewClient(tc.url)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("error %v, want one mentioning %q and no password", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			switch c := c.(type) {
			case *redis.ClusterClient:
				o := c.Options()
				if !tc.cluster || !slices.Equal(o.Addrs, tc.addrs) || (o.TLSConfig != nil) != tc.tls || o.Username != tc.user || o.Password != tc.pass || !o.ContextTimeoutEnabled {
					t.Fatalf("cluster client %+v", o)
				}
			case *redis.Client:
				o := c.Options()
				if tc.cluster || (o.TLSConfig != nil) != tc.tls || !o.ContextTimeoutEnabled {
					t.Fatalf("client %+v", o)
				}
			default:
				t.Fatalf("client of type %T", c)
			}
		})
	}
}
