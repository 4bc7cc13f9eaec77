"""Dashboard of the workers' EMF metrics and an alarm on failed executions.

Workers emit CloudWatch Embedded Metric Format records in namespace ``FasDL`` with one
dimension ``Stack`` (the stack name, env ``FASDL_STACK``); times in seconds.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
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


class Monitoring(Construct):
    """CloudWatch dashboard plus a failed-execution alarm."""

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str,
                 state_machine: sfn.IStateMachine) -> None:
        super().__init__(scope, construct_id)
        self._stack_name = stack_name
        self._state_machine = state_machine
        self.alarm = self._build_alarm()
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
