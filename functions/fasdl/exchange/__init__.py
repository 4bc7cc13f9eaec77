"""The shard exchange: channels (S3, Valkey, memory), checked frames, K-REDUCE (phased and
pipelined), the bfloat16 codec and the in-flight memory cap. Imports training (the optimizer
step), aws and the contract."""
