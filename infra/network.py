"""Network for the Valkey channel: an isolated VPC, flow logs and the two security groups.

Only workers (and the profiler, which measures the same paths) live in the VPC. Inside it they
need S3 (free gateway endpoint) and the cache, nothing else: Lambda ships logs and EMF metrics
outside the function's ENI, so no interface endpoint and no NAT are needed. Trigger and
finalize stay outside the VPC.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

MAX_AZS = 2
SUBNET_CIDR_MASK = 22  # 1,019 addresses per AZ: room for W ENIs during scale-out
CACHE_PORT = 6379
HTTPS_PORT = 443
FLOW_LOG_RETENTION = logs.RetentionDays.ONE_MONTH

VPC_ID = "Vpc"
FLOW_LOG_ID = "FlowLog"
FLOW_LOG_GROUP_ID = "FlowLogGroup"
S3_ENDPOINT_ID = "S3Endpoint"
WORKER_SG_ID = "WorkerSecurityGroup"
CACHE_SG_ID = "CacheSecurityGroup"


class Network(Construct):
    """VPC with isolated subnets, S3 gateway endpoint, flow logs, worker and cache SGs."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.vpc = self._build_vpc()
        self.flow_log = self._build_flow_log()
        self.worker_security_group = self._build_worker_security_group()
        self.cache_security_group = self._build_cache_security_group()
        self._connect()

    def _build_vpc(self) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self, VPC_ID,
            max_azs=MAX_AZS,
            nat_gateways=0,  # isolated by design: workers reach only S3 and the cache
            subnet_configuration=[ec2.SubnetConfiguration(
                name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                cidr_mask=SUBNET_CIDR_MASK)],
            restrict_default_security_group=False,  # avoids a custom-resource Lambda
        )
        vpc.add_gateway_endpoint(S3_ENDPOINT_ID, service=ec2.GatewayVpcEndpointAwsService.S3)
        return vpc

    def _build_flow_log(self) -> ec2.FlowLog:
        group = logs.LogGroup(self, FLOW_LOG_GROUP_ID, retention=FLOW_LOG_RETENTION,
                              removal_policy=RemovalPolicy.DESTROY)
        return self.vpc.add_flow_log(
            FLOW_LOG_ID, destination=ec2.FlowLogDestination.to_cloud_watch_logs(group),
            traffic_type=ec2.FlowLogTrafficType.ALL)

    def _build_worker_security_group(self) -> ec2.SecurityGroup:
        group = ec2.SecurityGroup(self, WORKER_SG_ID, vpc=self.vpc, allow_all_outbound=False,
                                  description="FasDL workers: egress to S3 and the cache only")
        # The subnets' only route out is the S3 gateway endpoint, so 443 reaches S3 alone.
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT),
                              "S3 through the gateway endpoint")
        return group

    def _build_cache_security_group(self) -> ec2.SecurityGroup:
        return ec2.SecurityGroup(self, CACHE_SG_ID, vpc=self.vpc, allow_all_outbound=False,
                                 description="FasDL Valkey cache: ingress from workers only")

    def _connect(self) -> None:
        self.cache_security_group.add_ingress_rule(
            self.worker_security_group, ec2.Port.tcp(CACHE_PORT), "Valkey from workers")
        self.worker_security_group.add_egress_rule(
            self.cache_security_group, ec2.Port.tcp(CACHE_PORT), "Valkey")
