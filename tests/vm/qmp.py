#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""tests/vm/qmp.py: the host half of run.sh --hotplug.

Watches the VM's result channel (a file QEMU appends the guest's ttyS1 to)
for request lines a test prints,

    @@gpunvme HOTPLUG <seq> del     unplug the gpunvme controller (device_del)
    @@gpunvme HOTPLUG <seq> add     plug it back in (device_add, as at boot)

and carries each out once over QEMU's QMP socket.  The guest learns the
outcome from what its own kernel sees (the device leaving or appearing in
sysfs), so nothing is sent back; every step is logged here with its time.
Only these two requests exist: the guest cannot make QEMU do anything else.

usage: qmp.py QMP_SOCKET RESULT_FILE DEVICE_ID DEVICE_ADD_ARGS
Exits when QEMU closes the socket (it has quit).
"""
import json
import os
import re
import select
import socket
import sys
import time

REQUEST = re.compile(r'^@@gpunvme HOTPLUG ([0-9]+) (del|add)\s*$')
CONNECT_DEADLINE = 60   # s for QEMU to create the socket
DELETED_DEADLINE = 90   # s from device_del to DEVICE_DELETED (pciehp waits 5 s)
ADD_DEADLINE = 60       # s of device_add retries while the old device is not gone yet
REPLY_DEADLINE = 30     # s for any QMP reply


def log(msg):
    print(f"# run.sh: hotplug: {msg}", flush=True)


class Gone(Exception):
    """QEMU closed the QMP socket."""


class Qmp:
    def __init__(self, path):
        deadline = time.monotonic() + CONNECT_DEADLINE
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.buf = b''
        self.events = []
        self.recv(REPLY_DEADLINE)   # greeting
        self.execute('qmp_capabilities')

    def recv(self, timeout):
        """One JSON message, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b'\n' not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            data = self.sock.recv(65536)
            if not data:
                raise Gone()
            self.buf += data
        line, self.buf = self.buf.split(b'\n', 1)
        return json.loads(line)

    def execute(self, cmd, args=None):
        msg = {'execute': cmd}
        if args is not None:
            msg['arguments'] = args
        self.sock.sendall(json.dumps(msg).encode() + b'\n')
        deadline = time.monotonic() + REPLY_DEADLINE
        while time.monotonic() < deadline:
            m = self.recv(deadline - time.monotonic())
            if m is None:
                break
            if 'event' in m:
                self.events.append(m)
            elif 'return' in m or 'error' in m:
                return m
        raise TimeoutError(f'no reply to {cmd} within {REPLY_DEADLINE} s')

    def wait_event(self, name, device, timeout):
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get('event') == name and e.get('data', {}).get('device') == device:
                    del self.events[i]
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            m = self.recv(min(left, 0.5))
            if m is not None and 'event' in m:
                self.events.append(m)

    def poll(self, timeout):
        """Collect events for up to `timeout` s (notices QEMU quitting)."""
        m = self.recv(timeout)
        if m is not None and 'event' in m:
            self.events.append(m)


def unplug(q, dev):
    t0 = time.monotonic()
    r = q.execute('device_del', {'id': dev})
    if 'error' in r:
        log(f"device_del {dev} failed: {r['error'].get('desc')}")
        return
    log(f"device_del {dev} accepted; waiting for the guest to release the slot")
    if q.wait_event('DEVICE_DELETED', dev, DELETED_DEADLINE):
        log(f"{dev} deleted after {time.monotonic() - t0:.1f} s")
    else:
        log(f"no DEVICE_DELETED for {dev} within {DELETED_DEADLINE} s")


def plug(q, dev, args):
    t0 = time.monotonic()
    while True:
        # HMP's device_add takes the -device syntax as it is.
        r = q.execute('human-monitor-command', {'command-line': f'device_add {args}'})
        out = r.get('return', '') if 'return' in r else r['error'].get('desc', '?')
        if 'error' not in r and not out.strip():
            log(f"device_add {dev} done after {time.monotonic() - t0:.1f} s")
            return
        if 'Duplicate' in out and time.monotonic() - t0 < ADD_DEADLINE:
            q.poll(0.5)     # the old device is still being finalised
            continue
        log(f"device_add {args} failed: {out.strip()}")
        return


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    sock_path, results, dev, add_args = sys.argv[1:]
    try:
        q = Qmp(sock_path)
    except (OSError, TimeoutError, Gone) as e:
        log(f"no QMP connection on {sock_path}: {e}")
        return 1
    log(f"QMP connected; watching {os.path.basename(results)} for requests")
    done = set()
    offset, partial = 0, b''
    try:
        while True:
            with open(results, 'rb') as f:
                f.seek(offset)
                data = f.read()
            offset += len(data)
            partial += data
            *lines, partial = partial.split(b'\n')
            for raw in lines:
                m = REQUEST.match(raw.decode('utf-8', 'replace').rstrip('\r'))
                if not m or m.group(1) in done:
                    continue
                done.add(m.group(1))
                log(f"request {m.group(1)}: {m.group(2)}")
                if m.group(2) == 'del':
                    unplug(q, dev)
                else:
                    plug(q, dev, add_args)
            q.poll(0.2)
    except Gone:
        return 0
    except (OSError, TimeoutError) as e:
        log(f"stopped: {e}")
        return 1


if __name__ == '__main__':
    sys.exit(main())
