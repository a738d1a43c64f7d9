package config

import (
	"errors"
	"fmt"
	"net/url"
)

// ValidateWebhookURL checks a webhook URL (the offline nudge's): absolute
// http or https with a host, no user info (the secret signs requests;
// credentials do not belong in a URL that is logged and rendered).
func ValidateWebhookURL(s string) error {
	if s == "" {
		return errors.New("empty URL")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", RedactURL(s))
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q: no host", RedactURL(s))
	}
	if u.User != nil {
		return fmt.Errorf("%q: no user or password in the URL (requests are signed with the secret)", RedactURL(s))
	}
	return nil
}
