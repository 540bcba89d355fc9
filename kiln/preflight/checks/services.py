"""Is every AWS service the cluster uses offered in the region? (SSM's public global-infrastructure parameters)"""

from __future__ import annotations

from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "services"
# SSM publishes /aws/service/global-infrastructure/regions/<region>/services/<service> for each one offered.
REGION_SERVICE = "/aws/service/global-infrastructure/regions/{region}/services/{service}"
SERVICE_LIST = "/aws/service/global-infrastructure/services/{service}/regions"
GET_PARAMETERS_MAX = 10
LABELS = {
    "pcs": "AWS Parallel Computing Service",
    "sagemaker": "SageMaker (HyperPod)",
    "eks": "Amazon EKS",
    "fsx": "Amazon FSx",
    "imagebuilder": "EC2 Image Builder",
    "scheduler": "EventBridge Scheduler",
}


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    offered: set[str] = set()
    wanted = list(plan.services)
    for start in range(0, len(wanted), GET_PARAMETERS_MAX):
        names = [
            REGION_SERVICE.format(region=plan.region, service=s) for s in wanted[start : start + GET_PARAMETERS_MAX]
        ]
        answer = aws.ssm.get_parameters(Names=names)
        offered |= {parameter["Name"].rsplit("/", 1)[-1] for parameter in answer["Parameters"]}
    findings = [
        Finding(
            check=NAME,
            status="fail",
            subject=LABELS.get(service, service),
            message=f"not offered in {plan.region}",
            remedy=f"choose a region that offers it (`aws ssm get-parameters-by-path --path "
            f"{SERVICE_LIST.format(service=service)}`) and set `region`",
        )
        for service in wanted
        if service not in offered
    ]
    if not findings:
        findings.append(Finding(check=NAME, status="ok", subject=plan.region, message=f"offers {', '.join(wanted)}"))
    return findings


CHECK = Check(name=NAME, about="services in the region", run=check)
