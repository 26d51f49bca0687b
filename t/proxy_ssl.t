#!/usr/bin/perl

# TLS to upstreams (proxy_pass https://): requests reach a TLS backend (one
# of sluice's own ssl servers, or a Perl IO::Socket::SSL daemon); SNI only
# with proxy_ssl_server_name on, and the name proxy_ssl_name makes;
# proxy_ssl_verify with the right CA, a wrong CA, a name that does not match
# and proxy_ssl_verify_depth; a client certificate for a backend that asks
# for one; keep-alive reuse of TLS connections and keepalive_min keeping
# them warm; session resumption on a new connection; a handshake failure
# (a plain HTTP peer) retried on the next peer; proxy_ssl_protocols that
# the backend does not speak; proxy_pass https:// with variables;
# proxy_connect_race racing handshakes; a WebSocket tunnel over TLS.
# Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;
use IO::Select;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_ssl_client ec_ca_in ec_signed_in/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http/)->plan(32);
my $d = $t->testdir();


# A CA, another one, an intermediate CA under the first; the backend's
# certificate (backend.example) and a client's signed by the CA, and one
# signed by the intermediate (served with it).
$t->write_file('ca.ext', "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign,cRLSign\n");
$t->write_file('leaf.ext', "basicConstraints=CA:FALSE\nsubjectAltName=DNS:backend.example\n");
ec_ca_in($d, $_) for 'ca', 'other';
sub signed { ec_signed_in($d, @_) }
signed('backend', 'ca', 'leaf.ext');
signed('client', 'ca', 'leaf.ext');
signed('int', 'ca', 'ca.ext');
signed('deep', 'int', 'leaf.ext');
$t->write_file('deep-chain.crt', $t->read_file('deep.crt') . $t->read_file('int.crt'));

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    access_log off;

    ssl_certificate     backend.crt;
    ssl_certificate_key backend.key;

    # The TLS backends.
    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        location / {
            return 200 "sni=$ssl_server_name reused=$ssl_session_reused conn=$connection $ssl_protocol";
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_certificate     deep-chain.crt;
        ssl_certificate_key deep.key;
        location / { return 200 "deep"; }
    }
    server {
        listen 127.0.0.1:%%PORT_8446%% ssl;
        ssl_protocols TLSv1.2;
        location / { return 200 "v12 $ssl_protocol"; }
    }
    # A plain one.
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / { return 200 "plain"; }
    }

    upstream backend.example {
        server 127.0.0.1:%%PORT_8443%%;
    }
    upstream once {
        server 127.0.0.1:%%PORT_8443%%;
        keepalive 0;
    }
    upstream mixed {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8443%%;
    }
    upstream warm {
        server 127.0.0.1:%%PORT_8443%%;
        keepalive_min 1;
    }
    upstream race {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8443%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location / { proxy_pass https://127.0.0.1:%%PORT_8443%%; }
        location /sni/ {
            proxy_pass https://backend.example/;
            proxy_ssl_server_name on;
        }
        location /nosni/ { proxy_pass https://backend.example/; }
        location /named/ {
            proxy_pass https://backend.example/;
            proxy_ssl_server_name on;
            proxy_ssl_name named.example:8443;
        }
        location /verify/ {
            proxy_pass https://backend.example/;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate ca.crt;
        }
        location /wrongca/ {
            proxy_pass https://backend.example/;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate other.crt;
        }
        location /wrongname/ {
            proxy_pass https://backend.example/;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate ca.crt;
            proxy_ssl_name wrong.example;
        }
        location /deep1/ {
            proxy_pass https://127.0.0.1:%%PORT_8445%%/;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate ca.crt;
            proxy_ssl_name backend.example;
        }
        location /deep0/ {
            proxy_pass https://127.0.0.1:%%PORT_8445%%/;
            proxy_ssl_verify on;
            proxy_ssl_verify_depth 0;
            proxy_ssl_trusted_certificate ca.crt;
            proxy_ssl_name backend.example;
        }
        location /once/ { proxy_pass https://once/; }
        location /mixed/ { proxy_pass https://mixed/; }
        location /warm/ { proxy_pass https://warm/; }
        location /race/ {
            proxy_pass https://race/;
            proxy_connect_timeout 5s;
            proxy_connect_race 100ms;
        }
        location /v13/ {
            proxy_pass https://127.0.0.1:%%PORT_8446%%/;
            proxy_ssl_protocols TLSv1.3;
        }
        location /v12/ { proxy_pass https://127.0.0.1:%%PORT_8446%%/; }
        location /var/ {
            set $b 127.0.0.1:%%PORT_8443%%;
            proxy_pass https://$b;
        }
        location /mtls/ {
            proxy_pass https://127.0.0.1:%%PORT_8447%%/;
            proxy_ssl_certificate client.crt;
            proxy_ssl_certificate_key client.key;
        }
        location /nocert/ { proxy_pass https://127.0.0.1:%%PORT_8447%%/; }
        location /ws {
            proxy_pass https://127.0.0.1:%%PORT_8448%%;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
        }
    }
}

EOF

$t->blackhole(port(8082));
$t->run();

# A TLS daemon: answers with the client certificate's subject (asking for
# one with verify), or tunnels after a 101 (upper-casing what it gets).
sub tls_daemon {
	my ($port, %o) = @_;
	my $l = IO::Socket::SSL->new(
		LocalAddr => "127.0.0.1:$port",
		Listen => 16,
		ReuseAddr => 1,
		SSL_server => 1,
		SSL_cert_file => "$d/backend.crt",
		SSL_key_file => "$d/backend.key",
		# SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
		$o{verify} ? (SSL_verify_mode => 3, SSL_ca_file => "$d/ca.crt")
			: (SSL_verify_mode => 0),
	) or die "tls daemon: " . IO::Socket::SSL::errstr() . "\n";
	open my $fh, '>', "$d/tls_$port.ready" or die;
	close $fh;
	while (1) {
		my $c = $l->accept() or next;
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			my $n = $c->sysread(my $buf, 4096);
			last unless $n;
			$req .= $buf;
		}
		if ($req =~ /^Upgrade:/mi) {
			$c->syswrite("HTTP/1.1 101 Switching Protocols\r\n"
				. "Upgrade: test\r\nConnection: Upgrade\r\n\r\n");
			while (1) {
				my $n = $c->sysread(my $buf, 4096);
				last unless $n;
				$c->syswrite(uc $buf);
			}
		} else {
			my $body = 'client=' . ($c->peer_certificate('subject') // 'none');
			$c->syswrite("HTTP/1.1 200 OK\r\nContent-Length: " . length($body)
				. "\r\nConnection: close\r\n\r\n$body");
		}
		$c->close(SSL_fast_shutdown => 1);
	}
}

for my $p ([8447, verify => 1], [8448]) {
	my ($n, @o) = @$p;
	$t->run_daemon(\&tls_daemon, port($n), @o);
	$t->waitforfile("$d/tls_" . port($n) . '.ready') or die "tls daemon did not start\n";
}

sub body {
	my ($uri) = @_;
	my $r = http_get($uri) // '';
	my ($status) = $r =~ m!^HTTP/1\.1 (\d+)!;
	$r =~ s/.*?\r\n\r\n//s;
	return (($status // 0) . " $r");
}

like(body('/'), qr/^200 sni= reused=\. conn=\d+ TLSv1\.3$/, 'proxied over TLS');
like(body('/sni/'), qr/^200 sni=backend\.example /, 'SNI with proxy_ssl_server_name on');
like(body('/nosni/'), qr/^200 sni= /, 'no SNI by default');
like(body('/named/'), qr/^200 sni=named\.example /, 'proxy_ssl_name, its port left out');
like(body('/var/'), qr/^200 sni= /, 'https with variables');

# Verification.
like(body('/verify/'), qr/^200 /, 'verified with the right CA');
like(body('/wrongca/'), qr/^502 /, 'a certificate of another CA: 502');
ok($t->waitforlog(qr/\[error\] .*upstream SSL certificate verify error: \(20:unable to get local issuer certificate\) while SSL handshaking to upstream, client: 127\.0\.0\.1, server: , request: "GET \/wrongca\/ HTTP\/1\.0", upstream: "https:\/\/127\.0\.0\.1:\d+\/", host: "localhost"/),
	'verify error logged as nginx');
like(body('/wrongname/'), qr/^502 /, 'a name the certificate does not have: 502');
ok($t->waitforlog(qr/upstream SSL certificate does not match "wrong\.example" while SSL handshaking to upstream/),
	'the name checked is proxy_ssl_name\'s');
like(body('/deep1/'), qr/^200 deep/, 'one intermediate within proxy_ssl_verify_depth 1');
like(body('/deep0/'), qr/^502 /, 'not within proxy_ssl_verify_depth 0');
ok($t->waitforlog(qr/upstream SSL certificate verify error: \(22:certificate chain too long\)/),
	'chain too long logged');

# A client certificate.
like(body('/mtls/'), qr/^200 client=.*CN\s*=\s*client/, 'client certificate presented');
like(body('/nocert/'), qr/^502 /, 'none: the backend refuses');

# Keep-alive: one upstream connection for several requests.
my ($c1) = body('/') =~ /conn=(\d+)/;
my ($c2) = body('/') =~ /conn=(\d+)/;
my ($c3) = body('/') =~ /conn=(\d+)/;
ok(defined $c1 && $c1 eq $c2 && $c2 eq $c3, 'upstream TLS connection kept alive');

# Resumption on a new connection (keepalive 0 closes each one).
my $first = body('/once/');
my $second = body('/once/');
like($second, qr/reused=r/, 'session resumed on a new connection');
my ($o1) = $first =~ /conn=(\d+)/;
my ($o2) = $second =~ /conn=(\d+)/;
ok(defined $o1 && defined $o2 && $o1 ne $o2, 'on another connection');

# A plain HTTP peer behind https://: a handshake failure, the next peer.
like(body('/mixed/'), qr/^200 sni=/, 'handshake failure retried on the next peer');
like(body('/mixed/'), qr/^200 sni=/, 'and again');
ok($t->waitforlog(qr/\[error\] .*SSL_do_handshake\(\) failed \(SSL: .+\) while SSL handshaking to upstream, client: 127\.0\.0\.1, .*upstream: "https:\/\/127\.0\.0\.1:${\ port(8081)}\/"/),
	'handshake failure logged as nginx');

# proxy_ssl_protocols.
like(body('/v12/'), qr/^200 v12 TLSv1\.2/, 'TLSv1.2 backend');
like(body('/v13/'), qr/^502 /, 'proxy_ssl_protocols TLSv1.3 to a TLSv1.2 backend: 502');
ok($t->waitforlog(qr/SSL_do_handshake\(\) failed \(SSL: .+\) while SSL handshaking to upstream, .*request: "GET \/v13\/ /),
	'protocol mismatch logged');

# keepalive_min keeps a TLS connection open: requests find it ready.
my ($w1) = body('/warm/') =~ /conn=(\d+)/;
my ($w2) = body('/warm/') =~ /conn=(\d+)/;
ok(defined $w1 && $w1 eq $w2, 'keepalive_min connection used');
my $warm_conn = $w1 // 0;
my ($fresh) = body('/') =~ /conn=(\d+)/;
ok($warm_conn < ($fresh // 0) && $warm_conn < ($c1 // 0),
	'opened before the first request');

# proxy_connect_race: a peer that never answers SYNs does not hold the
# request; the TLS handshake to the next one wins.
my $start = time();
like(body('/race/'), qr/^200 sni=/, 'raced handshake');
ok(time() - $start < 3, 'without waiting for the connect timeout');

# A WebSocket tunnel over TLS.
my $s = http("GET /ws HTTP/1.1\nHost: localhost\nUpgrade: test\nConnection: Upgrade\n\n", start => 1);
my $sel = IO::Select->new($s);
my $head = '';
while ($head !~ /\r\n\r\n/ && $sel->can_read(3)) {
	$s->sysread($head, 4096, length $head) or last;
}
like($head, qr!^HTTP/1\.1 101 !, '101 over TLS');
$s->syswrite('hello tunnel');
my $got = '';
while (length($got) < 12 && $sel->can_read(3)) {
	$s->sysread($got, 4096, length $got) or last;
}
is($got, 'HELLO TUNNEL', 'tunnel over TLS both ways');
close $s;

# $upstream_addr carries no scheme; a log line's upstream URL does.
like(body('/verify/'), qr/^200 /, 'still serving');
unlike($t->read_file('error.log'), qr/upstream: "http:\/\/127\.0\.0\.1:${\ port(8443)}/,
	'no http:// upstream URL for https');
