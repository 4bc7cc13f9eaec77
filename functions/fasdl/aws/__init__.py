"""What the functions need of the AWS platform itself: the Lambda account and function state,
the ElastiCache endpoint lookup, CloudWatch metrics and REPORT lines, S3 error codes, the torch
layer's loading and the sandbox's allocator. Imports only the contract."""
