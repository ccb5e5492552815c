// Package wiretest is for tests of code that runs batchlock's scripts: Fake,
// an in-memory model of what the scripts do to lock keys, fencing counters
// and cancel marks, which the unit tests run a Client against with faults
// staged; and a redis-server of the test binary's own (ServerClient, Main)
// for the tests that run the scripts themselves.
package wiretest
