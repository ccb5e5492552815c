// Package pgserver starts a throwaway PostgreSQL server for tests and demos:
// the installed server binaries (Debian's postgresql package) run as a child
// process on a free loopback port, with a data directory in a fresh
// temporary directory, trust authentication, and no durability (fsync off),
// since everything is removed by Close.
//
// PostgreSQL refuses to run as root: started by root, the server runs as the
// postgres user (which the package creates), and its directory is owned by
// that user. Started by anyone else, it runs as the caller.
package pgserver
