"""Short-lived environments for CI: `kiln ci up/run/down/sweep/extend`, the TTL reaper, the CI identity."""
