"""Stand-ins for the AWS services a run talks to: Step Functions (moto's ASL interpreter,
adapter.py), the Lambda control plane, ElastiCache's and CloudWatch Logs' APIs on loopback
ports, and the synthesized template made runnable."""
