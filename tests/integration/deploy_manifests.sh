#!/usr/bin/env bash
# The deployment files that cannot run here are checked for what they must say: the ParallelCluster
# configuration (keys known to ParallelCluster 3, a Slurm queue per GPU type with EFA and a
# placement group, FSx linked to S3, local NVMe, the bootstrap action), the EKS manifests (MPIJob,
# FSx claim, eksctl node group, and that they agree with each other), the Dockerfile's packages
# against scripts/install-deps, and the Slurm scripts' directives and shell syntax.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  echo "SKIPPED deploy_manifests: $PY cannot import yaml (python3-yaml, installed by make deps)"
  exit 0
fi

# --- shell syntax of every script of the three paths
for f in "$ROOT"/slurm/*.sbatch "$ROOT"/slurm/*.sh "$ROOT"/ParallelCluster/bootstrap.sh "$ROOT"/eks/entrypoint.sh; do
  bash -n "$f" || fail "$f: bash syntax error"
  [ -x "$f" ] || fail "$f: not executable"
done
echo "ok: shell syntax of slurm/, ParallelCluster/bootstrap.sh, eks/entrypoint.sh"

# --- the Slurm scripts' directives
m=$ROOT/slurm/multi-node.sbatch
for want in '^#SBATCH --ntasks-per-node=8$' '^#SBATCH --gpus-per-node=8$' '^#SBATCH --exclusive$' \
            '^#SBATCH --requeue$' '^#SBATCH --signal=USR1@120$' '^srun --mpi=pmix ' '--resume auto' \
            '^source "\$scripts/efa-env.sh"' 'RUN_DIR=\${RUN_DIR:-/fsx/' 'scontrol requeue "\$SLURM_JOB_ID"'; do
  grep -qE -- "$want" "$m" || fail "multi-node.sbatch lacks /$want/"
done
for want in '^export FI_PROVIDER=efa$' '^export NCCL_NET="AWS Libfabric"$' 'FI_EFA_USE_DEVICE_RDMA=1' '^export NCCL_DEBUG='; do
  grep -qE -- "$want" "$ROOT/slurm/efa-env.sh" || fail "efa-env.sh lacks /$want/"
done
# --signal=B: signals only the batch shell, not dptrain's ranks; but elastic.sbatch's batch shell
# is dptrain-elastic (exec), which asks the job for its checkpoint.
for f in "$ROOT"/slurm/*.sbatch; do
  [ "$(basename "$f")" = elastic.sbatch ] && continue
  ! grep -q -- '--signal=B:' "$f" || fail "$f: --signal=B: signals only the batch shell, not dptrain's ranks"
done
for want in '^#SBATCH --no-kill$' '^#SBATCH --signal=B:TERM@120$' '^exec "\$elastic" --nodes' '--global-batch "\$GLOBAL_BATCH"'; do
  grep -qE -- "$want" "$ROOT/slurm/elastic.sbatch" || fail "elastic.sbatch lacks /$want/"
done
grep -q '"\$bench" allreduce \$BENCH_ARGS -J "\$RUN_DIR/allreduce.json"' "$ROOT/slurm/allreduce-bench.sbatch" \
  || fail "allreduce-bench.sbatch does not write RUN_DIR/allreduce.json"
echo "ok: slurm/ directives (one task per GPU, PMIx, --signal=USR1@120, requeue, EFA/NCCL environment)"

"$PY" - "$ROOT" <<'PYEOF'
import re, sys, yaml
root = sys.argv[1]
failed = []
def check(cond, what):
    if not cond:
        failed.append(what)
    return cond
def get(d, path):
    """d[a][b]... for path 'a.b...', None when any part is missing."""
    for k in path.split('.'):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d
def load_all(rel):
    with open(f"{root}/{rel}") as f:
        text = f.read()
    return text, [d for d in yaml.safe_load_all(text) if d is not None]
def placeholders(text):
    """${VAR} names used outside comments, and whether each is named in a comment."""
    used = set(re.findall(r'\$\{([A-Z0-9_]+)\}', "\n".join(l.split('#', 1)[0] for l in text.splitlines())))
    comments = "\n".join(l for l in text.splitlines() if l.lstrip().startswith('#'))
    return used, {v for v in used if re.search(r'\b' + v + r'\b', comments)}

# ---------------------------------------------------------------- ParallelCluster 3
text, docs = load_all("ParallelCluster/cluster-config.yaml")
pc = docs[0]
# Keys ParallelCluster 3 knows at each level used here (from its configuration reference): a
# misspelt key would be refused by pcluster, so it is refused here too.
known = {
    "": {"Region", "Image", "HeadNode", "Scheduling", "SharedStorage", "Tags", "Iam", "Monitoring",
         "Imds", "CustomS3Bucket", "AdditionalPackages", "DeploymentSettings", "LoginNodes"},
    "Image": {"Os", "CustomAmi"},
    "HeadNode": {"InstanceType", "Networking", "Ssh", "LocalStorage", "CustomActions", "Iam", "Dcv",
                 "Imds", "Image", "DisableSimultaneousMultithreading", "SharedStorageType"},
    "HeadNode.Networking": {"SubnetId", "ElasticIp", "SecurityGroups", "AdditionalSecurityGroups", "Proxy"},
    "HeadNode.Ssh": {"KeyName", "AllowedIps"},
    "HeadNode.LocalStorage": {"RootVolume", "EphemeralVolume"},
    "HeadNode.CustomActions": {"OnNodeStart", "OnNodeConfigured", "OnNodeUpdated"},
    "HeadNode.Iam": {"InstanceRole", "InstanceProfile", "S3Access", "AdditionalIamPolicies"},
    "Scheduling": {"Scheduler", "SlurmSettings", "SlurmQueues", "ScalingStrategy"},
    "Scheduling.SlurmSettings": {"ScaledownIdletime", "QueueUpdateStrategy", "EnableMemoryBasedScheduling",
                                 "CustomSlurmSettings", "CustomSlurmSettingsIncludeFile", "Database", "Dns",
                                 "MungeKeySecretArn", "ExternalSlurmdbd"},
    "queue": {"Name", "CapacityType", "AllocationStrategy", "JobExclusiveAllocation", "ComputeSettings",
              "Networking", "ComputeResources", "CustomActions", "Iam", "Image", "HealthChecks", "Tags",
              "CustomSlurmSettings", "CapacityReservationTarget"},
    "queue.ComputeSettings": {"LocalStorage"},
    "queue.ComputeSettings.LocalStorage": {"RootVolume", "EphemeralVolume"},
    "queue.Networking": {"SubnetIds", "AssignPublicIp", "SecurityGroups", "AdditionalSecurityGroups",
                         "PlacementGroup", "Proxy"},
    "queue.Networking.PlacementGroup": {"Enabled", "Id", "Name"},
    "queue.CustomActions": {"OnNodeStart", "OnNodeConfigured"},
    "queue.Iam": {"InstanceRole", "InstanceProfile", "S3Access", "AdditionalIamPolicies"},
    "resource": {"Name", "InstanceType", "Instances", "MinCount", "MaxCount", "DynamicNodePriority",
                 "StaticNodePriority", "SpotPrice", "DisableSimultaneousMultithreading", "SchedulableMemory",
                 "HealthChecks", "Efa", "CapacityReservationTarget", "Networking", "CustomSlurmSettings", "Tags"},
    "resource.Efa": {"Enabled", "GdrSupport"},
    "storage": {"MountDir", "Name", "StorageType", "EbsSettings", "EfsSettings", "FsxLustreSettings",
                "FsxOntapSettings", "FsxOpenZfsSettings", "FileCacheSettings"},
    "storage.FsxLustreSettings": {"StorageCapacity", "DeploymentType", "ImportedFileChunkSize", "DataCompressionType",
                                  "ExportPath", "ImportPath", "WeeklyMaintenanceStartTime",
                                  "AutomaticBackupRetentionDays", "CopyTagsToBackups", "DailyAutomaticBackupStartTime",
                                  "PerUnitStorageThroughput", "BackupId", "KmsKeyId", "FileSystemId",
                                  "AutoImportPolicy", "DriveCacheType", "StorageType", "DeletionPolicy",
                                  "DataRepositoryAssociations", "FileSystemTypeVersion"},
}
def keys_known(d, level, where):
    if isinstance(d, dict):
        unknown = set(d) - known[level]
        check(not unknown, f"cluster-config.yaml: {where}: keys ParallelCluster 3 does not have: {sorted(unknown)}")
for level in [l for l in known if not l.startswith(("queue", "resource", "storage"))]:
    keys_known(pc if level == "" else get(pc, level), level, level or "top level")
check(get(pc, "Region"), "cluster-config.yaml: no Region")
check(get(pc, "Image.Os") in ("ubuntu2204", "alinux2023"), "cluster-config.yaml: Image.Os must be ubuntu2204 or alinux2023")
check(get(pc, "HeadNode.InstanceType"), "cluster-config.yaml: no HeadNode.InstanceType")
check(get(pc, "HeadNode.Networking.SubnetId"), "cluster-config.yaml: no HeadNode.Networking.SubnetId")
check(re.fullmatch(r'\$\{[A-Z_]+\}', str(get(pc, "HeadNode.Ssh.KeyName"))),
      "cluster-config.yaml: HeadNode.Ssh.KeyName must be a named ${...} value for the user's key pair")
check(str(get(pc, "HeadNode.CustomActions.OnNodeConfigured.Script")).endswith("/bootstrap.sh"),
      "cluster-config.yaml: HeadNode must run bootstrap.sh OnNodeConfigured")
check(get(pc, "Scheduling.Scheduler") == "slurm", "cluster-config.yaml: Scheduler must be slurm")
types = set()
for q in get(pc, "Scheduling.SlurmQueues") or []:
    name = q.get("Name")
    keys_known(q, "queue", f"queue {name}")
    for sub in ("ComputeSettings", "ComputeSettings.LocalStorage", "Networking", "Networking.PlacementGroup",
                "CustomActions", "Iam"):
        keys_known(get(q, sub), "queue." + sub, f"queue {name} {sub}")
    check(get(q, "Networking.PlacementGroup.Enabled") is True, f"queue {name}: PlacementGroup not enabled")
    check(get(q, "Networking.SubnetIds"), f"queue {name}: no Networking.SubnetIds")
    check(str(get(q, "ComputeSettings.LocalStorage.EphemeralVolume.MountDir")).startswith("/"),
          f"queue {name}: no node-local NVMe (ComputeSettings.LocalStorage.EphemeralVolume.MountDir)")
    check(str(get(q, "CustomActions.OnNodeConfigured.Script")).endswith("/bootstrap.sh"),
          f"queue {name}: compute nodes must run bootstrap.sh OnNodeConfigured")
    for r in q.get("ComputeResources") or []:
        keys_known(r, "resource", f"queue {name} resource {r.get('Name')}")
        keys_known(r.get("Efa"), "resource.Efa", f"queue {name} resource {r.get('Name')} Efa")
        check(get(r, "Efa.Enabled") is True, f"queue {name} resource {r.get('Name')}: Efa not enabled")
        check(isinstance(r.get("MaxCount"), int) and r["MaxCount"] >= 2, f"queue {name}: MaxCount < 2 (no multi-node jobs)")
        types.add(r.get("InstanceType"))
check(types >= {"p5.48xlarge", "p4d.24xlarge"}, f"cluster-config.yaml: want p5.48xlarge and p4d.24xlarge compute resources, have {sorted(map(str, types))}")
fsx = [s for s in pc.get("SharedStorage") or [] if s.get("StorageType") == "FsxLustre"]
if check(len(fsx) == 1, "cluster-config.yaml: want one FsxLustre SharedStorage"):
    keys_known(fsx[0], "storage", "FSx storage")
    keys_known(fsx[0].get("FsxLustreSettings"), "storage.FsxLustreSettings", "FsxLustreSettings")
    check(fsx[0].get("MountDir") == "/fsx", "cluster-config.yaml: FSx must be mounted on /fsx (the scripts' default)")
    s = fsx[0].get("FsxLustreSettings") or {}
    linked = (str(s.get("ImportPath", "")).startswith("s3://") and str(s.get("ExportPath", "")).startswith("s3://")) \
        or bool(s.get("DataRepositoryAssociations"))
    check(linked, "cluster-config.yaml: FSx not linked to S3 (ImportPath/ExportPath or DataRepositoryAssociations)")
used, documented = placeholders(text)
check(used == documented, f"cluster-config.yaml: ${{...}} values not explained in its header: {sorted(used - documented)}")
print(f"ok: ParallelCluster/cluster-config.yaml: {len(get(pc, 'Scheduling.SlurmQueues'))} queues "
      f"({', '.join(sorted(map(str, types)))}) with EFA and placement groups, FSx on /fsx linked to S3, "
      f"/scratch NVMe, bootstrap.sh; placeholders {', '.join(sorted(used))}")

# ---------------------------------------------------------------- EKS
text_job, (job,) = load_all("eks/mpijob.yaml")
text_pvc, pvc_docs = load_all("eks/fsx-pvc.yaml")
text_ng, (ng,) = load_all("eks/nodegroup.yaml")
check(job.get("apiVersion") == "kubeflow.org/v2beta1" and job.get("kind") == "MPIJob", "mpijob.yaml: want a kubeflow.org/v2beta1 MPIJob")
spec = job.get("spec") or {}
slots = spec.get("slotsPerWorker")
check(slots == 8, "mpijob.yaml: slotsPerWorker must be 8 (one rank per GPU)")
launcher = get(spec, "mpiReplicaSpecs.Launcher") or {}
worker = get(spec, "mpiReplicaSpecs.Worker") or {}
check(launcher.get("replicas") == 1, "mpijob.yaml: want 1 launcher")
nworkers = worker.get("replicas")
check(isinstance(nworkers, int) and nworkers >= 1, "mpijob.yaml: no worker replicas")
lc = (get(launcher, "template.spec.containers") or [{}])[0]
wspec = get(worker, "template.spec") or {}
wc = (wspec.get("containers") or [{}])[0]
cmd = " ".join(map(str, (lc.get("command") or []) + (lc.get("args") or [])))
check((lc.get("command") or [""])[0] == "/usr/local/bin/dptrain-run",
      "mpijob.yaml: the launcher must run under dptrain-run (SIGTERM -> checkpoint, exit 75)")
grace = int(get(launcher, "template.spec").get("terminationGracePeriodSeconds", 30))
stop = int(next((e["value"] for e in lc.get("env", []) if e["name"] == "DPTRAIN_STOP_GRACE"), 300))
check(stop + 20 <= grace, f"mpijob.yaml: DPTRAIN_STOP_GRACE {stop} must leave mpirun 20 s of the launcher's "
      f"terminationGracePeriodSeconds {grace}")
# The workers' entry point waits DPTRAIN_STOP_GRACE (its default 100 s when unset) for their ranks'
# checkpoint, then ends them: less than the launcher's, and a stop that needs the difference loses
# its checkpoint. The same value, inside the workers' own grace period.
wstop = int(next((e["value"] for e in wc.get("env", []) if e["name"] == "DPTRAIN_STOP_GRACE"), 100))
wgrace = int(wspec.get("terminationGracePeriodSeconds", 30))
check(wstop == stop and wstop + 10 <= wgrace,
      f"mpijob.yaml: the workers' DPTRAIN_STOP_GRACE ({wstop}) must be the launcher's ({stop}) and leave 10 s of "
      f"their terminationGracePeriodSeconds ({wgrace})")
check("mpirun" in cmd and "/usr/local/bin/dptrain " in cmd and "/usr/local/share/dptrain/configs/" in cmd
      and "--resume auto" in cmd,
      "mpijob.yaml: the launcher must run mpirun ... /usr/local/bin/dptrain (installed by the Dockerfile) "
      "--config /usr/local/share/dptrain/configs/... --resume auto")
np_ = re.search(r'-np (\d+)', cmd)
check(np_ and isinstance(nworkers, int) and int(np_.group(1)) == nworkers * (slots or 0),
      f"mpijob.yaml: mpirun -np must be workers x slotsPerWorker = {nworkers} x {slots}")
for var in re.findall(r'-x (\w+)', cmd):
    check(var == "LD_LIBRARY_PATH" or any(e.get("name") == var for e in lc.get("env") or []),
          f"mpijob.yaml: mpirun exports {var}, which the launcher does not set")
env = {e.get("name"): e.get("value") for e in lc.get("env") or []}
check(env.get("NCCL_NET") in ("AWS Libfabric", "Libfabric", "OFI"), "mpijob.yaml: NCCL_NET must name the aws-ofi-nccl network")
check(env.get("FI_PROVIDER") == "efa", "mpijob.yaml: FI_PROVIDER must be efa")
check(lc.get("image") == wc.get("image") and lc.get("image"), "mpijob.yaml: launcher and workers must run the same image")
limits = get(wc, "resources.limits") or {}
check(limits.get("nvidia.com/gpu") == 8, "mpijob.yaml: workers must have nvidia.com/gpu: 8")
efa = limits.get("vpc.amazonaws.com/efa")
check(efa in (32, 4), "mpijob.yaml: vpc.amazonaws.com/efa must be 32 (p5.48xlarge) or 4 (p4d.24xlarge)")
mounts = {m.get("name"): m.get("mountPath") for m in wc.get("volumeMounts") or []}
vols = {v.get("name"): v for v in wspec.get("volumes") or []}
shm = [n for n, p in mounts.items() if p == "/dev/shm"]
check(shm and get(vols.get(shm[0], {}), "emptyDir.medium") == "Memory", "mpijob.yaml: /dev/shm must be an emptyDir with medium Memory")
claims = {n: get(v, "persistentVolumeClaim.claimName") for n, v in vols.items() if "persistentVolumeClaim" in v}
check(any(n in mounts for n in claims), "mpijob.yaml: workers do not mount the FSx claim")
# fsx-pvc.yaml
sc = [d for d in pvc_docs if d.get("kind") == "StorageClass"]
pv = [d for d in pvc_docs if d.get("kind") == "PersistentVolumeClaim"]
if check(len(sc) == 1 and len(pv) == 1, "fsx-pvc.yaml: want one StorageClass and one PersistentVolumeClaim"):
    sc, pv = sc[0], pv[0]
    check(sc.get("provisioner") == "fsx.csi.aws.com", "fsx-pvc.yaml: the StorageClass must use the FSx CSI driver (fsx.csi.aws.com)")
    params = sc.get("parameters") or {}
    for p in ("subnetId", "securityGroupIds", "deploymentType"):
        check(p in params, f"fsx-pvc.yaml: StorageClass lacks parameters.{p}")
    check(get(pv, "spec.storageClassName") == get(sc, "metadata.name"), "fsx-pvc.yaml: the claim does not use the StorageClass")
    check("ReadWriteMany" in (get(pv, "spec.accessModes") or []), "fsx-pvc.yaml: the claim must be ReadWriteMany (every pod mounts it)")
    check(get(pv, "metadata.name") in claims.values(), "mpijob.yaml: claimName does not match fsx-pvc.yaml's claim")
# nodegroup.yaml
check(ng.get("apiVersion") == "eksctl.io/v1alpha5" and ng.get("kind") == "ClusterConfig", "nodegroup.yaml: want an eksctl ClusterConfig")
gpu = [g for g in ng.get("managedNodeGroups") or [] if str(g.get("instanceType")) in ("p5.48xlarge", "p4d.24xlarge")]
if check(len(gpu) == 1, "nodegroup.yaml: want one managed node group of p5.48xlarge or p4d.24xlarge"):
    g = gpu[0]
    check(g.get("amiFamily") == "AmazonLinux2023", "nodegroup.yaml: the GPU node group must use amiFamily AmazonLinux2023")
    check(g.get("efaEnabled") is True, "nodegroup.yaml: efaEnabled must be true")
    check(get(g, "placement.groupName"), "nodegroup.yaml: no placement group")
    check(len(g.get("availabilityZones") or []) == 1, "nodegroup.yaml: the EFA node group must sit in one Availability Zone")
    want_efa = {"p5.48xlarge": 32, "p4d.24xlarge": 4}[g["instanceType"]]
    check(efa == want_efa, f"mpijob.yaml asks for {efa} EFA interfaces but {g['instanceType']} has {want_efa}")
    # A worker's requests must fit one node, less what the kubelet and system pods reserve (about
    # 5%): asking for p5's 150 CPUs on a 96-vCPU p4d left it Pending.
    vcpus, gib = {"p5.48xlarge": (192, 2048), "p4d.24xlarge": (96, 1152)}[g["instanceType"]]
    req = get(wc, "resources.requests") or {}
    cpu = float(str(req.get("cpu", "0")).rstrip("m")) / (1000 if str(req.get("cpu", "")).endswith("m") else 1)
    mem = str(req.get("memory", "0Gi"))
    mem_gib = float(mem[:-2]) / (1024 if mem.endswith("Mi") else 1) if mem.endswith(("Gi", "Mi")) else -1
    check(0 < cpu <= 0.95 * vcpus and 0 < mem_gib <= 0.95 * gib,
          f"mpijob.yaml: a worker requests {req.get('cpu')} CPUs and {mem}, more than a {g['instanceType']} "
          f"({vcpus} vCPUs, {gib} GiB) can give it")
    labels = g.get("labels") or {}
    check(all(labels.get(k) == v for k, v in (wspec.get("nodeSelector") or {}).items()),
          "mpijob.yaml: the workers' nodeSelector does not match the GPU node group's labels")
    for t in g.get("taints") or []:
        check(any(tol.get("key") == t.get("key") and tol.get("effect") == t.get("effect") for tol in wspec.get("tolerations") or []),
              f"mpijob.yaml: the workers do not tolerate the node group's taint {t.get('key')}")
check(any(a.get("name") == "aws-fsx-csi-driver" for a in ng.get("addons") or []), "nodegroup.yaml: no aws-fsx-csi-driver add-on")
for name, t in (("mpijob.yaml", text_job), ("fsx-pvc.yaml", text_pvc), ("nodegroup.yaml", text_ng)):
    used, documented = placeholders(t)
    check(used == documented, f"{name}: ${{...}} values not explained in its header: {sorted(used - documented)}")
print(f"ok: eks/: MPIJob v2beta1 {nworkers} workers x {slots} slots (-np {np_.group(1) if np_ else '?'}), "
      f"8 GPUs + {efa} EFA per worker, /dev/shm in memory, FSx claim, node group AL2023 + EFA + placement group")

# serve.yaml (stable and canary tracks, one Service, a PDB) and serve-gpu.yaml (GPU servers, a
# Service, a PDB, a KEDA ScaledObject); serve-hpa.yaml (the HPA alternative); the gpu-serve nodes.
def server(dep, name):
    """Checks one serving Deployment's pod; returns its options."""
    pod = get(dep, "spec.template.spec") or {}
    c = (pod.get("containers") or [{}])[0]
    argv = (c.get("command") or []) + (c.get("args") or [])
    check(argv[:2] == ["/usr/local/bin/dptrain", "serve"], f"{name}: the container must run /usr/local/bin/dptrain serve")
    opts = dict(a[2:].split("=", 1) for a in argv[2:] if a.startswith("--") and "=" in a)
    check(opts.get("host") == "0.0.0.0", f"{name}: --host=0.0.0.0 (the default 127.0.0.1 is unreachable from the Service)")
    port = int(opts.get("port", 8080))
    check(c.get("image") == lc.get("image"), f"{name}: the same image as the MPIJob")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        check(get(c, probe + ".httpGet.path") == path and get(c, probe + ".httpGet.port") == port,
              f"{name}: {probe} must GET {path} on port {port}")
        check(int(get(c, probe + ".timeoutSeconds") or 1) >= 3,
              f"{name}: {probe} needs timeoutSeconds >= 3 (Kubernetes' 1 s fails under many idle connections)")
    check(any(p.get("containerPort") == port for p in c.get("ports") or []), f"{name}: containerPort {port}")
    # The stop: preStop's sleep (the endpoints controller takes the pod out), then the drain, inside the grace.
    pre = get(c, "lifecycle.preStop.exec.command") or []
    sleep = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else -1
    drain = float(opts.get("drain-seconds", 30))
    grace = int(pod.get("terminationGracePeriodSeconds", 30))
    check(sleep >= 5, f"{name}: preStop must sleep 5 s or more before SIGTERM (the Service still sends meanwhile)")
    check(sleep + drain + 10 <= grace,
          f"{name}: preStop {sleep} s + --drain-seconds {drain:g} + 10 s exceeds terminationGracePeriodSeconds {grace}")
    check(opts.get("follow") in ("promoted", "canary"), f"{name}: --follow promoted or canary (a fleet serves promotions)")
    svols = {v.get("name"): get(v, "persistentVolumeClaim.claimName") for v in pod.get("volumes") or []}
    smounts = {m.get("name"): m.get("mountPath") for m in c.get("volumeMounts") or []}
    check(any(svols.get(n) == get(pv, "metadata.name") and p == "/fsx" for n, p in smounts.items()),
          f"{name}: the FSx claim must be mounted on /fsx")
    check(str(opts.get("checkpoint", "")).startswith("${RUN_DIR}"), f"{name}: --checkpoint=${{RUN_DIR}}")
    return opts, port, c, pod
def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
def kinds(docs, kind):
    return [d for d in docs if d.get("kind") == kind]
text_srv, srv_docs = load_all("eks/serve.yaml")
deps, svcs, pdbs = kinds(srv_docs, "Deployment"), kinds(srv_docs, "Service"), kinds(srv_docs, "PodDisruptionBudget")
if check(len(deps) == 2 and len(svcs) == 1 and len(pdbs) == 1,
         "serve.yaml: want two Deployments (stable, canary), one Service and one PodDisruptionBudget"):
    follows = {}
    for dep in deps:
        opts, port, c, pod = server(dep, f"serve.yaml {get(dep, 'metadata.name')}")
        follows[opts.get("follow")] = get(dep, "spec.replicas")
        labels = get(dep, "spec.template.metadata.labels") or {}
        check(selects(get(svcs[0], "spec.selector"), labels), f"serve.yaml: the Service does not select {get(dep, 'metadata.name')}'s pods")
        check(selects(get(pdbs[0], "spec.selector.matchLabels"), labels), f"serve.yaml: the PodDisruptionBudget does not cover {get(dep, 'metadata.name')}")
        check(selects(get(dep, "spec.selector.matchLabels"), labels), f"serve.yaml: {get(dep, 'metadata.name')}'s selector does not match its pods")
    check(set(follows) == {"promoted", "canary"} and follows["promoted"] > follows.get("canary", 0) >= 1,
          f"serve.yaml: want a stable track (--follow promoted) with more replicas than a canary one (--follow canary): {follows}")
    check(any(p.get("targetPort") in (port, "http") for p in get(svcs[0], "spec.ports") or []),
          "serve.yaml: the Service's targetPort is not the server's port")
    check(get(pdbs[0], "apiVersion") == "policy/v1" and (get(pdbs[0], "spec.maxUnavailable") or get(pdbs[0], "spec.minAvailable")),
          "serve.yaml: the PodDisruptionBudget (policy/v1) needs maxUnavailable or minAvailable")
    used, documented = placeholders(text_srv)
    check(used == documented, f"serve.yaml: ${{...}} values not explained in its header: {sorted(used - documented)}")
    print(f"ok: eks/serve.yaml: stable {follows.get('promoted')} + canary {follows.get('canary')} servers on port {port} "
          "behind one Service, a PodDisruptionBudget, probes, preStop + --drain-seconds inside the grace period")
text_gpu, gpu_docs = load_all("eks/serve-gpu.yaml")
gdeps, gso = kinds(gpu_docs, "Deployment"), kinds(gpu_docs, "ScaledObject")
if check(len(gdeps) == 1 and len(gso) == 1 and len(kinds(gpu_docs, "Service")) == 1 and len(kinds(gpu_docs, "PodDisruptionBudget")) == 1,
         "serve-gpu.yaml: want a Deployment, a Service, a PodDisruptionBudget and a ScaledObject"):
    dep, so = gdeps[0], gso[0]
    opts, port, c, pod = server(dep, "serve-gpu.yaml")
    check(opts.get("device") == "cuda" and (get(c, "resources.limits") or {}).get("nvidia.com/gpu") == 1, "serve-gpu.yaml: --device=cuda and nvidia.com/gpu: 1")
    serve_ng = [g for g in ng.get("managedNodeGroups") or [] if (g.get("labels") or {}).get("dptrain.io/node") == "gpu-serve"]
    if check(len(serve_ng) == 1, "nodegroup.yaml: want one node group labelled dptrain.io/node: gpu-serve"):
        g = serve_ng[0]
        check(g.get("minSize") == 0 and g.get("propagateASGTags") is True and get(g, "iam.withAddonPolicies.autoScaler") is True,
              "nodegroup.yaml: gpu-serve must scale from zero (minSize 0, propagateASGTags, the autoScaler policy)")
        tags = g.get("tags") or {}
        check(tags.get("k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu") == "1",
              "nodegroup.yaml: gpu-serve needs the node-template tag of its GPU (the autoscaler sees no node at zero)")
        check(selects(pod.get("nodeSelector"), g.get("labels") or {}), "serve-gpu.yaml: its nodeSelector is not gpu-serve's labels")
        for t in g.get("taints") or []:
            check(any(tol.get("key") == t.get("key") and tol.get("effect") == t.get("effect") for tol in pod.get("tolerations") or []),
                  f"serve-gpu.yaml: the pods do not tolerate gpu-serve's taint {t.get('key')}")
    check(so.get("apiVersion") == "keda.sh/v1alpha1", "serve-gpu.yaml: the ScaledObject must be keda.sh/v1alpha1")
    check(get(so, "spec.scaleTargetRef.name") == get(dep, "metadata.name"), "serve-gpu.yaml: the ScaledObject does not scale the Deployment")
    lo, hi = get(so, "spec.minReplicaCount"), get(so, "spec.maxReplicaCount")
    check(isinstance(lo, int) and isinstance(hi, int) and 1 <= lo < hi, "serve-gpu.yaml: want 1 <= minReplicaCount < maxReplicaCount")
    queries = [get(t, "metadata.query") or "" for t in get(so, "spec.triggers") or [] if t.get("type") == "prometheus"]
    check(any("dptrain_serve_queue_depth" in q for q in queries) and any("dptrain_serve_generated_tokens" in q for q in queries),
          "serve-gpu.yaml: the ScaledObject must scale on the queue depth and the tokens per second from /metrics")
    for t in get(so, "spec.triggers") or []:
        check(get(t, "metadata.serverAddress") and get(t, "metadata.threshold"), "serve-gpu.yaml: a trigger lacks serverAddress or threshold")
    used, documented = placeholders(text_gpu)
    check(used == documented, f"serve-gpu.yaml: ${{...}} values not explained in its header: {sorted(used - documented)}")
    print(f"ok: eks/serve-gpu.yaml: GPU servers on gpu-serve (minSize 0, autoscaler tags), KEDA {lo}..{hi} replicas on "
          "queue depth and tokens/s, PodDisruptionBudget, drain inside the grace period")
text_hpa, (hpa,) = load_all("eks/serve-hpa.yaml")
check(hpa.get("apiVersion") == "autoscaling/v2" and hpa.get("kind") == "HorizontalPodAutoscaler", "serve-hpa.yaml: want an autoscaling/v2 HPA")
check(get(hpa, "spec.scaleTargetRef.name") == "dptrain-serve-gpu", "serve-hpa.yaml: it must scale dptrain-serve-gpu")
names = [get(m, "pods.metric.name") for m in get(hpa, "spec.metrics") or [] if m.get("type") == "Pods"]
check(set(names) == {"dptrain_serve_queue_depth", "dptrain_serve_generated_tokens_per_second"},
      f"serve-hpa.yaml: want Pods metrics of the queue depth and tokens/s, have {names}")
used, documented = placeholders(text_hpa)
check(used == documented, f"serve-hpa.yaml: ${{...}} values not explained in its header: {sorted(used - documented)}")
# The metric names the scalers read are the ones /metrics exports.
with open(f"{root}/src/infer/serve_metrics.cpp") as f:
    exported = f.read()
for m in ("dptrain_serve_queue_depth", "dptrain_serve_generated_tokens_per_second"):
    check(f'"{m}"' in exported, f"the scalers read {m}, which src/infer/serve_metrics.cpp does not export")
print("ok: eks/serve-hpa.yaml: the HPA alternative on the same two metrics, which /metrics exports")

# eks/elastic: the MPIJob above with dptrain-elastic as its launcher, by a kustomize patch.
text_k, (kz,) = load_all("eks/elastic/kustomization.yaml")
check(kz.get("kind") == "Kustomization" and kz.get("resources") == ["../mpijob.yaml"],
      "eks/elastic: want a Kustomization of ../mpijob.yaml")
ops = {}
for pt in kz.get("patches") or []:
    check(get(pt, "target.kind") == "MPIJob" and get(pt, "target.name") == job["metadata"]["name"],
          "eks/elastic: the patch must target mpijob.yaml's MPIJob")
    for op in yaml.safe_load(pt.get("patch") or "[]") or []:
        ops[op.get("path")] = op.get("value")
base = "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/"
eargs = [str(a) for a in ops.get(base + "args") or []]
check(ops.get(base + "command") == ["/usr/local/bin/dptrain-elastic"], "eks/elastic: the launcher must run dptrain-elastic")
def arg(name):
    return eargs[eargs.index(name) + 1] if name in eargs and eargs.index(name) + 1 < len(eargs) else None
nodes = re.fullmatch(r"(\d+):(\d+)", arg("--nodes") or "")
check(arg("--host-discovery") == "/etc/mpi/discover_hosts.sh", "eks/elastic: hosts from the MPI Operator's /etc/mpi/discover_hosts.sh")
check(arg("--slots") == str(slots), f"eks/elastic: --slots must be slotsPerWorker ({slots})")
check(nodes and int(nodes.group(2)) >= (nworkers or 0), "eks/elastic: --nodes MIN:MAX with MAX at least the workers")
gb = int(arg("--global-batch") or 0)
check(nodes and gb > 0 and all(gb % (n * slots) == 0 for n in range(int(nodes.group(1)), int(nodes.group(2)) + 1)),
      "eks/elastic: --global-batch must be kept by every worker count in --nodes (a multiple of each count x slots)")
check("--" in eargs and "/usr/local/bin/dptrain" in eargs and "--run-dir" in eargs, "eks/elastic: -- /usr/local/bin/dptrain ... --run-dir")
for var in re.findall(r'-x (\w+)', arg("--mpirun") or ""):
    check(var == "LD_LIBRARY_PATH" or any(e.get("name") == var for e in lc.get("env") or []),
          f"eks/elastic: mpirun exports {var}, which the launcher does not set")
if not failed:
    print(f"ok: eks/elastic: dptrain-elastic --nodes {arg('--nodes')} x {arg('--slots')} slots from "
          f"/etc/mpi/discover_hosts.sh, --global-batch {gb} kept on each worker count")
if failed:
    print("\n".join("FAIL: " + f for f in failed), file=sys.stderr)
    sys.exit(1)
PYEOF

# --- the Dockerfile installs every package of scripts/install-deps's pkgs (building and running),
# and none of its test_pkgs (what only the tests use).
list_of() { sed -n "/^$1=(/,/)/p" "$ROOT/scripts/install-deps" | tr -d '()' | sed "s/^$1=//" | tr -s ' \n' '\n' | sed '/^$/d'; }
deps=$(list_of pkgs)
test_only=$(list_of test_pkgs)
[ "$(wc -l <<<"$deps")" -ge 10 ] || fail "could not read the pkgs array of scripts/install-deps"
[ "$(wc -l <<<"$test_only")" -ge 5 ] || fail "could not read the test_pkgs array of scripts/install-deps"
# The words after `apt-get install` in the Dockerfile's RUN lines (continuations joined), up to &&.
docker=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$ROOT/eks/Dockerfile" | grep -E '^RUN ' \
  | grep -oE 'apt-get install [^&]*' | tr -s ' ' '\n' | grep -vE '^(apt-get|install|-.*)$' | sort -u)
missing=() unneeded=()
for p in $deps; do grep -qx -- "$p" <<<"$docker" || missing+=("$p"); done
for p in $test_only; do ! grep -qx -- "$p" <<<"$docker" || unneeded+=("$p"); done
[ ${#missing[@]} = 0 ] || fail "eks/Dockerfile does not apt-get install these packages of scripts/install-deps: ${missing[*]}"
[ ${#unneeded[@]} = 0 ] || fail "eks/Dockerfile installs test-only packages: ${unneeded[*]}"
# ParallelCluster/bootstrap.sh installs the pkgs array alone.
grep -q "sed -n '/^pkgs=(/,/)/p' \"\$tmp/src/scripts/install-deps\"" "$ROOT/ParallelCluster/bootstrap.sh" \
  || fail "ParallelCluster/bootstrap.sh does not read the pkgs array of scripts/install-deps"
grep -qE '^ARG CUDA_IMAGE=nvidia/cuda:[^ ]*-devel-ubuntu22\.04$' "$ROOT/eks/Dockerfile" && grep -q '^FROM \${CUDA_IMAGE}$' "$ROOT/eks/Dockerfile" \
  || fail "eks/Dockerfile must build FROM an nvidia/cuda devel image on Ubuntu 22.04"
grep -q 'efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify' "$ROOT/eks/Dockerfile" || fail "eks/Dockerfile: no EFA installer run for containers"
grep -qE '^RUN .*make .*all' "$ROOT/eks/Dockerfile" || fail "eks/Dockerfile does not build dptrain with make"
grep -q '^ENTRYPOINT \["/opt/dptrain/eks/entrypoint.sh"\]$' "$ROOT/eks/Dockerfile" || fail "eks/Dockerfile: no entry point"
# Both images install dptrain (make install) where mpijob.yaml and the Slurm scripts look for it.
grep -q 'make .*install PREFIX=/usr/local' "$ROOT/eks/Dockerfile" || fail "eks/Dockerfile does not make install under /usr/local"
grep -q 'make -C "\$dir.new" install PREFIX=/usr/local' "$ROOT/ParallelCluster/bootstrap.sh" \
  || fail "ParallelCluster/bootstrap.sh does not make install under /usr/local"
echo "ok: eks/Dockerfile installs all $(wc -l <<<"$deps") packages of scripts/install-deps's pkgs and none of its test_pkgs, EFA installer, CUDA devel base"
