package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Load reads config files into one Config. Each path is a file, read
// whatever its name, or a directory, whose *.yaml and *.yml files are read
// (in name order, not descending into subdirectories, skipping names that
// start with "."). Symbolic links are followed, so the volume of a
// Kubernetes ConfigMap, whose files are links into a "..data" link to a
// hidden directory, loads like any other directory. It reports every
// problem of every file at once, and returns no Config if there is any.
func Load(paths ...string) (*Config, error) {
	return Loader{}.Load(paths...)
}

// LoadDir reads every *.yaml and *.yml file of dir, one domain per file, as
// envoyproxy/ratelimit reads its runtime directory; see Load. A directory
// without config files gives a Config without domains, which matches no
// request.
func LoadDir(dir string) (*Config, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fileError(dir, err)
	}
	if !fi.IsDir() {
		return nil, newError(dir, 0, 0, "", "not a directory")
	}
	return Load(dir)
}

// Validate checks config files without loading them anywhere: it is
// `floodgate config validate FILE...`. Each path is a file or a directory,
// as for Load; it reports every problem at once, and also a directory that
// holds no config file, since validating nothing is almost always a
// mistaken path.
func Validate(paths ...string) error {
	return Loader{}.Validate(paths...)
}

func (ld Loader) validate(paths []string) error {
	if len(paths) == 0 {
		return errors.New("config: validate: no file or directory given")
	}
	_, n, err := ld.load(paths)
	if err == nil && n == 0 {
		err = newError(strings.Join(paths, ", "), 0, 0, "", "no config files (*.yaml or *.yml) found")
	}
	return err
}

// load returns the config and the number of files read.
func (ld Loader) load(paths []string) (*Config, int, error) {
	var (
		errs    []error
		files   []string
		seen    = make(map[string]bool)
		domains []*Domain
	)
	add := func(f string) {
		if clean := filepath.Clean(f); !seen[clean] {
			seen[clean] = true
			files = append(files, f)
		}
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fileError(p, err))
			continue
		}
		if !fi.IsDir() {
			add(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fileError(p, err))
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !isConfigName(name) {
				continue
			}
			f := filepath.Join(p, name)
			fi, err := os.Stat(f) // follows the link of a ConfigMap file
			switch {
			case err != nil:
				errs = append(errs, fileError(f, err))
			case fi.Mode().IsRegular():
				add(f)
			}
		}
	}
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := parse(f, data, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if len(errs) > 0 {
		// The replaces naming nothing, of the files that parsed, are
		// problems too, where they cannot be a merge's doing.
		names := make(map[string]int)
		for _, d := range domains {
			names[d.Name]++
		}
		for _, d := range domains {
			if !ld.MergeDomains && names[d.Name] == 1 {
				errs = append(errs, d.unresolvedReplaces()...)
			}
		}
		return nil, len(files), errors.Join(errs...)
	}
	// A replaces naming no rate_limit is checked once the domains are
	// gathered, so that under MergeDomains it may name one of another of
	// the domain's files, and without it a domain split across two files
	// is reported as such.
	c, err := ld.New(domains...)
	return c, len(files), err
}

func isConfigName(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fileError(name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fileError(name, err)
	}
	if len(data) > MaxFileSize {
		return nil, newError(name, 0, 0, "", fmt.Sprintf("larger than the maximum %d bytes", MaxFileSize))
	}
	return data, nil
}

// fileError makes an *Error of an I/O error, without repeating the path.
func fileError(name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return newError(name, 0, 0, "", err.Error())
}
