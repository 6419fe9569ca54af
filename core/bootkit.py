"""A re-rented pod boots with no laptop: Vast's `onstart`, the shell script the container runs at EVERY start.

- `<state>/config.json` exists: this pod was set up before (by `up` over ssh, or by its own first boot) and
  the container was restarted (Vast resumes a paused instance: its processes were killed, its disk kept).
  `python -m gpuc.instance_side boot --again` restarts the agent and the job (instance_side/boot.py).
- else `$GPUC_BOOT_TICKET` is set (the watchdog re-rented the pod): POST {pod_id: $CONTAINER_ID, ticket} to
  `$GPUC_BOOT_URL/v1/boot` (core/api.py BootRequest -> BootAnswer), keep the answer in `<state>/boot.json`
  (mode 600 from its first byte: it holds the pod's secrets), fetch gpuc's wheel from the kit (file:// or a
  presigned https URL), check its sha256, unzip it (a pure wheel is a zip) into `<code>/boot-site`, then
  `python3 -m gpuc.instance_side boot` installs it for good and starts everything.
- else nothing: the first pod, `up` provisions it over ssh.

Python's standard library only (the image's python3 >= 3.9, found as `up` finds it: core/podinstall.py; an image
with none is said so in boot.out, and nothing starts), everything logged to `<state>/boot.out`. A "not yet" from the
watchdog (409 while the re-rent is still being registered, 408/425/429) is tried again, a bounded number of
times; any other 4xx (403: a ticket that will never be good) ends the boot at once. The ticket is
read from the environment inside Python, never put in argv or the log; it is spent at its first use, since
Vast echoes a pod's env in every listing. Vast takes at most 4096 characters of `onstart` (with `args`):
`onstart_script()` is checked against that by the tests. Nothing secret is in the script: it is the same for
every pod and goes into the provider's listing.
"""

from __future__ import annotations

from gpuc.core.podinstall import MIN_PYTHON, PYTHON_ENV, find_python_sh
from gpuc.core.podpaths import POD_ROOT_ENV, STATE_REL

BOOT_TICKET_ENV = "GPUC_BOOT_TICKET"
BOOT_URL_ENV = "GPUC_BOOT_URL"
BOOT_FILE = "boot.json"  # in PodPaths.state
BOOT_OUT = "boot.out"
BOOT_SITE = "boot-site"  # in PodPaths.code: the wheel's files, until the install puts them in place
ONSTART_MAX = 4096  # Vast: args + args_str + onstart together (reference/providers.md)
# /v1/boot on a dropped connection, a 5xx or a "not yet" (BOOT_RETRY): waits of 1, 2, 4 ... capped at
# BOOT_WAIT_CAP_S, about 21 min in all. It must outlast a re-rent cut after its create: the watchdog's act lease
# (functions/recovery/claim.py ACT_LEASE_S, 5 min) plus one reaper period (5 min on AWS) before the next
# pass registers the pod; then the pod gives up (unbooted, it is reaped as unregistered, never left billing).
BOOT_ATTEMPTS = 26
BOOT_WAIT_CAP_S = 60
# The watchdog's "not yet, try again" (409: the re-rent is still being registered; 425/429/408 likewise): tried
# again. Any other 4xx (403: this ticket will never be good) ends the boot at once.
BOOT_RETRY = (408, 409, 425, 429)

# Run by /bin/sh with the container's env. `$S` is PodPaths.state, `$S/bin/python` PodPaths.python (the
# launcher the install writes). The first boot runs detached (setsid): onstart must not hold the container's
# start for a download and an install.
_SH = """\
R=${%(root_env)s:-/}; S=${R%%/}/%(state_rel)s
mkdir -p "$S/code" && chmod 700 "$S" || exit 0
(umask 077; : >>"$S/%(out)s")
exec >>"$S/%(out)s" 2>&1 </dev/null
echo "gpuc boot: container start $(date -u +%%FT%%TZ)"
if [ -f "$S/config.json" ]; then
  setsid "$S/bin/python" -m gpuc.instance_side boot --again &
  exit 0
fi
[ -n "$%(ticket_env)s" ] || { echo "gpuc boot: no ticket: left to gpuc up"; exit 0; }
%(find)s
[ -n "$P" ] || { echo "gpuc boot: no python3 >= %(min)s in this image (found: ${F:-none}): nothing started, the \
watchdog ends the silent pod; rent with an image that has one (e.g. a PyTorch image)"; exit 0; }
%(python_env)s=$P; export %(python_env)s
setsid "$P" - "$S" <<'GPUC_PY' &
%(py)s
GPUC_PY
exit 0
"""

# Short names on purpose: the whole script must fit in Vast's 4096 characters.
_PY = """\
import hashlib,io,json,os,sys,time,zipfile
import urllib.error as E,urllib.request as U
S=sys.argv[1];J=S+"/%(boot_file)s";D=S+"/code/%(site)s"
def say(m):print("gpuc boot: "+m,flush=True)
def die(m):
 if os.path.exists(J):os.unlink(J)
 say(m+"; nothing started");sys.exit(1)
t=os.environ.pop("%(ticket_env)s","")
u=os.environ.get("%(url_env)s","").rstrip("/")
if not u.startswith(("https://","http://")):die("%(url_env)s is not an http(s) URL")
b=json.dumps({"pod_id":os.environ.get("CONTAINER_ID",""),"ticket":t}).encode()
a=None
for i in range(%(attempts)d):
 try:
  with U.urlopen(U.Request(u+"/v1/boot",b,{"Content-Type":"application/json"}),timeout=60) as r:a=r.read()
  break
 except E.HTTPError as e:
  if e.code<500 and e.code not in %(retry)r:die(f"/v1/boot refused the ticket ({e.code})")
  say(f"/v1/boot answered {e.code}; again")
 except (OSError,ValueError) as e:say(f"/v1/boot unreachable ({type(e).__name__}); again")
 time.sleep(min(2**i,%(cap)d))
if a is None:die("/v1/boot never answered")
if os.path.exists(J):os.unlink(J)
f=os.open(J,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600)
os.write(f,a);os.close(f)
try:
 k=json.loads(a)["kit"]
 with U.urlopen(k["wheel_url"],timeout=600) as r:w=r.read()
except Exception as e:die(f"no wheel ({type(e).__name__})")
if hashlib.sha256(w).hexdigest()!=k.get("wheel_sha256"):die("the wheel does not match its sha256")
n=os.path.basename(str(k.get("wheel_name","")))
if not n.endswith(".whl"):die("the kit names no wheel file")
with open(S+"/code/"+n,"wb") as f:f.write(w)
z=zipfile.ZipFile(io.BytesIO(w))
for n in z.namelist():
 if n.startswith("/") or "\\\\" in n or ".." in n.split("/"):die("the wheel names "+repr(n[:80]))
z.extractall(D)
say("wheel checked and unpacked; booting")
p=os.environ.get("PYTHONPATH")
os.environ["PYTHONPATH"]=D+(":"+p if p else "")
os.execv(sys.executable,[sys.executable,"-m","gpuc.instance_side","boot"])
"""


def onstart_script() -> str:
    """Vast's `onstart` for every gpuc pod that may be recovered (core/models.py PodSpec.onstart)."""
    names = {
        "root_env": POD_ROOT_ENV,
        "state_rel": STATE_REL,
        "out": BOOT_OUT,
        "ticket_env": BOOT_TICKET_ENV,
        "url_env": BOOT_URL_ENV,
        "boot_file": BOOT_FILE,
        "site": BOOT_SITE,
        "attempts": BOOT_ATTEMPTS,
        "cap": BOOT_WAIT_CAP_S,
        "retry": BOOT_RETRY,
        "python_env": PYTHON_ENV,
        "min": ".".join(map(str, MIN_PYTHON)),
    }
    return _SH % {**names, "find": find_python_sh(), "py": _PY % names}
