package imagestore

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"go.podman.io/image/v5/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// credentials is what a CRI AuthConfig means to containers/image.
type credentials struct {
	auth        *types.DockerAuthConfig // basic auth or an OAuth2 identity (refresh) token
	bearerToken string                  // a registry token sent as-is
}

// convertAuth translates the kubelet's AuthConfig. A nil or empty config
// yields no credentials, so the auth file (Options.AuthFile) is consulted.
// The "auth" field is docker's base64("user:password") and is used only when
// username and password are not given separately, as the kubelet does.
func convertAuth(a *runtimeapi.AuthConfig) (credentials, error) {
	if a == nil {
		return credentials{}, nil
	}
	var c credentials
	c.bearerToken = a.GetRegistryToken()
	user, pass := a.GetUsername(), a.GetPassword()
	if user == "" && pass == "" && a.GetAuth() != "" {
		raw, err := base64.StdEncoding.DecodeString(a.GetAuth())
		if err != nil {
			return credentials{}, fmt.Errorf("%w: auth config: \"auth\" is not base64: %w", errdefs.ErrInvalid, err)
		}
		var ok bool
		user, pass, ok = strings.Cut(string(raw), ":")
		if !ok {
			return credentials{}, fmt.Errorf("%w: auth config: \"auth\" is not base64(user:password)", errdefs.ErrInvalid)
		}
	}
	if user != "" || pass != "" || a.GetIdentityToken() != "" {
		c.auth = &types.DockerAuthConfig{
			Username:      user,
			Password:      pass,
			IdentityToken: a.GetIdentityToken(),
		}
	}
	return c, nil
}

// apply sets the credentials on a system context.
func (c credentials) apply(sys *types.SystemContext) {
	if c.auth != nil {
		sys.DockerAuthConfig = c.auth
	}
	if c.bearerToken != "" {
		sys.DockerBearerRegistryToken = c.bearerToken
	}
}

// key identifies the credentials without holding them in clear, so that two
// concurrent pulls of one image share a download only when they present the
// same credentials: a caller must never get an image through somebody
// else's access rights.
func (c credentials) key() string {
	if c.auth == nil && c.bearerToken == "" {
		return ""
	}
	h := sha256.New()
	if c.auth != nil {
		fmt.Fprintf(h, "%q %q %q ", c.auth.Username, c.auth.Password, c.auth.IdentityToken)
	}
	fmt.Fprintf(h, "%q", c.bearerToken)
	return hex.EncodeToString(h.Sum(nil))
}
