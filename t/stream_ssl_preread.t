#!/usr/bin/perl

# ssl_preread: a stream server reads the ClientHello without terminating
# TLS and routes by SNI through a map to one of two TLS backends with
# different certificates; the TLS session is the client's with the backend
# (its certificate is seen end to end). $ssl_preread_alpn_protocols and
# $ssl_preread_protocol; a non-TLS client gets the map's default; a
# ClientHello sent in pieces with pauses still routes; preread_buffer_size
# (400, "preread buffer full") and preread_timeout (closed, 200).
# Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use POSIX qw/:sys_wait_h/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

eval { require IO::Socket::SSL; IO::Socket::SSL->import(); 1 }
	or plan(skip_all => 'IO::Socket::SSL not installed');
`openssl version 2>&1` =~ /^OpenSSL/ or plan(skip_all => 'no openssl command');

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(16);
my $d = $t->testdir();

for my $n ('a', 'b') {
	system("cd $d && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		. "-keyout $n.key -out $n.crt -days 3 -subj /CN=$n.test >/dev/null 2>&1") == 0
		or die "openssl failed\n";
}

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        ssl_certificate     a.crt;
        ssl_certificate_key a.key;
        location / { return 200 "backend a $ssl_server_name"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_certificate     b.crt;
        ssl_certificate_key b.key;
        location / { return 200 "backend b $ssl_server_name"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "backend c"; }
    }
}

stream {
    log_format pre "$server_port $status $upstream_addr|$ssl_preread_server_name|$ssl_preread_alpn_protocols|$ssl_preread_protocol";
    access_log %%TESTDIR%%/stream.log pre;

    map $ssl_preread_server_name $up {
        a.test   up_a;
        b.test   up_b;
        default  up_c;
    }

    upstream up_a { server 127.0.0.1:%%PORT_8443%%; }
    upstream up_b { server 127.0.0.1:%%PORT_8444%%; }
    upstream up_c { server 127.0.0.1:%%PORT_8080%%; }

    server {
        listen 127.0.0.1:%%PORT_8070%%;
        ssl_preread on;
        proxy_pass $up;
    }

    server {
        listen 127.0.0.1:%%PORT_8071%%;
        ssl_preread on;
        preread_buffer_size 100;
        proxy_pass $up;
    }

    server {
        listen 127.0.0.1:%%PORT_8072%%;
        ssl_preread on;
        preread_timeout 1s;
        proxy_pass $up;
    }
}

EOF

$t->run();

# A TLS client through the preread port: (answer, backend certificate).
sub tls_get {
	my (%o) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port(8070),
		SSL_verify_mode => 0,
		SSL_hostname => $o{sni},
		$o{version} ? (SSL_version => $o{version}) : (),
		$o{alpn} ? (SSL_alpn_protocols => $o{alpn}) : (),
		Timeout => 5,
	) or return (undef, IO::Socket::SSL::errstr());
	my $subject = $s->peer_certificate('subject');
	$s->syswrite("GET / HTTP/1.0\r\nHost: x\r\n\r\n");
	my $r = '';
	while ($s->sysread(my $b, 4096)) { $r .= $b; }
	return ($r =~ /\r\n\r\n(.*)$/s ? $1 : $r, $subject);
}

sub logged {
	my ($re) = @_;
	return poll_until(sub { $t->read_file('stream.log') =~ $re });
}

my ($r, $subj) = tls_get(sni => 'a.test');
is($subj, '/CN=a.test', 'SNI a.test: backend a\'s certificate');
is($r, 'backend a a.test', 'SNI a.test: backend a answers');
($r, $subj) = tls_get(sni => 'b.test');
is($subj, '/CN=b.test', 'SNI b.test: backend b\'s certificate');
is($r, 'backend b b.test', 'SNI b.test: backend b answers');

my ($pa, $pb, $pc, $p) = (port(8443), port(8444), port(8080), port(8070));
($r) = tls_get(sni => 'a.test', alpn => ['h2', 'http/1.1']);
ok(logged(qr/^$p 200 127\.0\.0\.1:$pa\|a\.test\|h2,http\/1\.1\|TLSv1\.3$/m),
	'$ssl_preread_alpn_protocols, $ssl_preread_protocol');
($r) = tls_get(sni => 'b.test', version => 'TLSv1_2');
# No ALPN: found empty (logged empty, as nginx).
ok(logged(qr/^$p 200 127\.0\.0\.1:$pb\|b\.test\|\|TLSv1\.2$/m), 'a TLSv1.2 client');

# Not TLS: the variables are empty, the map's default routes.

$r = http_get('/', PeerAddr => '127.0.0.1:' . port(8070)) // '';
like($r, qr/\r\n\r\nbackend c$/, 'a plain client: the default upstream');
ok(logged(qr/^$p 200 127\.0\.0\.1:$pc\|-\|-\|-$/m), 'a plain client: empty variables');

# A ClientHello (TLSv1.2, so that the backend's certificate comes back in
# the clear), caught from a client by a listener of the test's own.

sub client_hello {
	my ($sni) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:0', Listen => 1, ReuseAddr => 1)
		or die "listen: $!\n";
	my $port = $l->sockport();
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		IO::Socket::SSL->new(PeerAddr => "127.0.0.1:$port", SSL_hostname => $sni,
			SSL_version => 'TLSv1_2', SSL_verify_mode => 0, Timeout => 3);
		POSIX::_exit(0);
	}
	my $c = $l->accept();
	my $hello = '';
	my $sel = IO::Select->new($c);
	while ($sel->can_read(3)) {
		$c->sysread(my $b, 4096) or last;
		$hello .= $b;
		last if length($hello) >= 5
			&& length($hello) >= 5 + unpack('n', substr($hello, 3, 2));
	}
	close $c;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	return $hello;
}

my $hello = client_hello('b.test');
ok(length($hello) > 100, 'a ClientHello caught');

# In pieces: a part of the record header, a part of the hello, the rest.

my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8070));
for my $piece (substr($hello, 0, 3), substr($hello, 3, 60), substr($hello, 63)) {
	$s->syswrite($piece);
	select(undef, undef, undef, 0.3);
}
$r = '';
my $sel = IO::Select->new($s);
while ($sel->can_read(3)) {
	$s->sysread(my $b, 4096) or last;
	$r .= $b;
	last if $r =~ /b\.test/;
}
like($r, qr/^\x16\x03\x03.*b\.test/s, 'a ClientHello in pieces: the right backend answers');
close $s;
ok(logged(qr/^$p \d+ 127\.0\.0\.1:$pb\|b\.test\|\|TLSv1\.2$/m), 'in pieces: routed by SNI');

# preread_buffer_size: a hello that does not fit.

$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8071));
$s->syswrite($hello);
ok(closed_within($s, 4), 'preread buffer full: closed');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ preread buffer full while prereading client data, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8071)}/),
	'preread buffer full logged');
my $p1 = port(8071);
# What came was read for a ClientHello: the variables are found, empty.
ok(logged(qr/^$p1 400 -\|\|\|$/m), 'preread buffer full: 400');

# preread_timeout: half a record header, then nothing.

$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8072));
$s->syswrite("\x16\x03");
ok(closed_within($s, 4), 'preread_timeout: closed');
my $p2 = port(8072);
ok(logged(qr/^$p2 200 -\|\|\|$/m), 'preread_timeout: 200, not proxied');

$t->stop();
