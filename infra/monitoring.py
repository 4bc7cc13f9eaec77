"""Dashboard of the workers' EMF metrics and an alarm on failed executions.

Workers emit CloudWatch Embedded Metric Format records in namespace ``FasDL`` with one
dimension ``Stack`` (the stack name, env ``FASDL_STACK``); times in seconds.

With ``-c alarm_email=ADDRESS`` the alarm publishes to an SNS topic with that address
subscribed. The topic is encrypted with its own customer managed KMS key: CloudWatch cannot use
the AWS managed ``alias/aws/sns`` key (its policy cannot grant CloudWatch), so an alarm on such a
topic fails to notify. The key costs $1/month, which is why there is no topic (and no key)
without an address: redeploy with the context value to subscribe later.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.compute import METRICS_NAMESPACE

STACK_DIMENSION = "Stack"
TIME_METRICS = ("IterationTime", "ComputeTime", "UploadTime", "AggregateTime",
                "DownloadTime", "IdleTime")
LOSS_METRIC = "Loss"
PERIOD = Duration.minutes(1)
WIDGET_WIDTH = 12
WIDGET_HEIGHT = 6
DASHBOARD_ID = "Dashboard"
ALARM_ID = "FailedExecutionsAlarm"
ALARM_TOPIC_ID = "AlarmTopic"
ALARM_KEY_ID = "AlarmTopicKey"
ALARM_TOPIC_SUFFIX = "-alarms"
CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"
# KMS's shortest waiting period; a key pending deletion is not billed.
KEY_PENDING_WINDOW = Duration.days(7)


class Monitoring(Construct):
    """CloudWatch dashboard plus a failed-execution alarm, mailed to ``alarm_email`` if set."""

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str,
                 state_machine: sfn.IStateMachine, alarm_email: str | None = None) -> None:
        super().__init__(scope, construct_id)
        self._stack_name = stack_name
        self._state_machine = state_machine
        self.alarm = self._build_alarm()
        self.topic: sns.Topic | None = None
        if alarm_email:
            self.topic = self._build_topic()
            # SNS mails a confirmation link; nothing is delivered until it is followed.
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
            self.alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))
        self.dashboard = self._build_dashboard()

    def _metric(self, name: str, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace=METRICS_NAMESPACE, metric_name=name,
                                 dimensions_map={STACK_DIMENSION: self._stack_name},
                                 statistic=statistic, period=PERIOD)

    def _build_alarm(self) -> cloudwatch.Alarm:
        return cloudwatch.Alarm(
            self, ALARM_ID,
            metric=self._state_machine.metric_failed(period=Duration.minutes(5),
                                                     statistic="Sum"),
            threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="A FasDL training execution failed",
        )

    def _build_topic(self) -> sns.Topic:
        """TLS-only topic under a dedicated key, publishable by this alarm alone."""
        name = f"{self._stack_name}{ALARM_TOPIC_SUFFIX}"
        # The ARN is built from the name: the key policy cannot Ref the topic it encrypts.
        topic_arn = Stack.of(self).format_arn(service="sns", resource=name)
        key = kms.Key(self, ALARM_KEY_ID, description=f"Encrypts the {name} SNS topic",
                      enable_key_rotation=True, pending_window=KEY_PENDING_WINDOW,
                      removal_policy=RemovalPolicy.DESTROY)  # no $1/month key left behind
        key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsEncryptForThisTopic",
            principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"],
            conditions={"StringEquals": {"kms:EncryptionContext:aws:sns:topicArn": topic_arn}}))
        topic = sns.Topic(self, ALARM_TOPIC_ID, topic_name=name, display_name="FasDL alarms",
                          master_key=key, enforce_ssl=True)
        # A topic policy replaces SNS's default one, so CloudWatch must be allowed explicitly.
        topic.add_to_resource_policy(iam.PolicyStatement(
            sid="FailedExecutionsAlarmPublishes",
            principals=[iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
            actions=["sns:Publish"], resources=[topic.topic_arn],
            conditions={"ArnEquals": {"aws:SourceArn": self.alarm.alarm_arn}}))
        return topic

    def _build_dashboard(self) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(self, DASHBOARD_ID)
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Iteration breakdown (avg, s)", width=WIDGET_WIDTH, height=WIDGET_HEIGHT,
                left=[self._metric(name, "Average") for name in TIME_METRICS]),
            cloudwatch.GraphWidget(
                title="Iteration time (p50 / p99 / max, s)", width=WIDGET_WIDTH,
                height=WIDGET_HEIGHT,
                left=[self._metric("IterationTime", stat) for stat in ("p50", "p99", "Maximum")]),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Training loss", width=WIDGET_WIDTH,
                                   height=WIDGET_HEIGHT,
                                   left=[self._metric(LOSS_METRIC, "Average")]),
            cloudwatch.GraphWidget(
                title="Executions", width=WIDGET_WIDTH, height=WIDGET_HEIGHT,
                left=[self._state_machine.metric_started(), self._state_machine.metric_succeeded(),
                      self._state_machine.metric_failed()]),
            cloudwatch.AlarmStatusWidget(alarms=[self.alarm], width=WIDGET_WIDTH),
        )
        return dashboard
