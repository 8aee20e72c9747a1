// Package config reads rate limit policies from YAML files.
package config
