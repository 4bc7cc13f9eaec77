"""The real servers a local run stores in, on loopback ports: Valkey, redis-server (TLS,
cluster mode), SeaweedFS (S3); the cache held to its data cap and ECPU/s maximum; the buckets
and key layout a local run uses. Imports nothing else of local/."""
