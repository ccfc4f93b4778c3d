"""serve_process.py: an `ember serve` process for the serve tests, on a
free port (--port 0); its address comes from the line it prints when
ready (an IPv6 one in brackets, http://[::1]:PORT). Each test file adds
the client side it needs (urllib requests in test_serve.py, raw sockets
in test_serve_trust.py)."""
import re
import signal
import subprocess


class ServeProcess:
    def __init__(self, ember, env, *args):
        self.p = subprocess.Popen([ember, "serve", *args, "--port", "0"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://(\[[0-9a-fA-F:]+\]|[0-9.]+):(\d+)", line)
        if not m:
            self.p.kill()
            raise AssertionError("no ready line: %r\n%s" % (line, self.p.stderr.read()))
        self.host, self.port = m.group(1).strip("[]"), int(m.group(2))
        self.url = "http://%s:%d" % (m.group(1), self.port)

    def stop(self, sig=signal.SIGTERM):
        """(exit status, stderr) once it ended; kills it after 30 s."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            _, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            _, err = self.p.communicate()
        assert "runtime error:" not in err, err  # UndefinedBehaviorSanitizer, in a sanitized build
        return self.p.returncode, err
