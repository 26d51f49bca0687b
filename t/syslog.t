#!/usr/bin/perl

# error_log and access_log to syslog, as nginx: RFC 3164 datagrams over UDP,
# "<PRI>Mmm dd hh:mm:ss HOST TAG: line", received here by a UDP socket the
# test holds. The error log's severity is the line's level; an access log
# has its own (severity=, default info); facility local7 unless set.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(13);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

error_log syslog:server=127.0.0.1:%%PORT_8514_UDP%%,tag=sluice_err warn;

events {
}

http {
    access_log syslog:server=127.0.0.1:%%PORT_8515_UDP%%,facility=local0,severity=notice,tag=web;
    error_log syslog:server=127.0.0.1:%%PORT_8514_UDP%%,nohostname info;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok\n"; }
        location /closed { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /plain {
            access_log syslog:server=127.0.0.1:%%PORT_8515_UDP%%,nohostname;
            return 204;
        }
    }
}

stream {
    log_format s "stream $status $server_port";
    access_log syslog:server=127.0.0.1:%%PORT_8515_UDP%% s;
    error_log syslog:server=127.0.0.1:%%PORT_8514_UDP%%;

    server {
        listen 127.0.0.1:%%PORT_8090%%;
        return "hi\n";
    }
}

EOF

my ($errs, $access) = map {
	Test::Sluice::_release_ports();
	IO::Socket::INET->new(Proto => 'udp', LocalAddr => '127.0.0.1:' . port($_, udp => 1))
		or die "udp $_: $!\n";
} (8514, 8515);
port(8081);
$t->run();

# Datagrams on $sock until one matches $re (at most 5 s); the match or ''.
sub datagram {
	my ($sock, $re) = @_;
	my $sel = IO::Select->new($sock);
	my $end = time() + 5;
	while ($sel->can_read($end - time())) {
		my $buf;
		$sock->recv($buf, 65536);
		return $buf if $buf =~ $re;
		last if time() >= $end;
	}
	return '';
}

my $head = qr/[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d/;

like(http_get('/'), qr/ 200 /, 'request served');
my $line = datagram($access, qr/GET \/ HTTP/);
like($line, qr/^<133>$head \S+ web: 127\.0\.0\.1 - - \[[^]]+\] "GET \/ HTTP\/1\.0" 200 3 "-" "-"$/,
	'access log: local0.notice (133), the host, the tag, the combined line, no newline');

like(http_get('/plain'), qr/ 204 /, 'second request served');
$line = datagram($access, qr/GET \/plain/);
like($line, qr/^<190>$head nginx: 127\.0\.0\.1 /, 'a location\'s own access log: local7.info (190), tag nginx, nohostname');

like(http_get('/closed'), qr/ 502 /, 'a proxy to a closed port: 502');
$line = datagram($errs, qr/connect\(\) failed/);
like($line, qr/^<187>$head \S+ sluice_err: \d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d \[error\] \d+#0: \*\d+ connect\(\) failed \(111: Connection refused\) while connecting to upstream/,
	'error log: local7 with the line\'s severity (error: 187), the whole error-log line');
unlike($line, qr/\n/, 'no newline in the datagram');

my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8090), Timeout => 5);
my $got = '';
$s->sysread($got, 100) if $s && IO::Select->new($s)->can_read(3);
is($got, "hi\n", 'stream session served');
close $s if $s;
like(datagram($access, qr/^<\d+>.* stream /), qr/^<190>$head \S+ nginx: stream 200 \d+$/,
	'stream access log to syslog');

# The file log still gets its lines.
ok($t->waitforlog(qr/connect\(\) failed/), 'the file error log has the line too');

$t->stop();

# Config errors in nginx's words, with file:line.
sub conf_error {
	my ($dir) = @_;
	$t->write_file('bad.conf', "events {}\nhttp {\n$dir;\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-e', 'stderr', '-t', '-c', "$d/bad.conf");
	return $rc ? $err : "exit 0: $err";
}
like(conf_error('error_log syslog:server=127.0.0.1,facility=local9'),
	qr/unknown syslog facility "local9" in \S+bad\.conf:3/, 'unknown facility');
like(conf_error('access_log syslog:tag=x'),
	qr/no syslog server specified in \S+bad\.conf:3/, 'no server');
like(conf_error('access_log syslog:server=127.0.0.1 combined buffer=4k'),
	qr/logs to syslog cannot be buffered in \S+bad\.conf:3/, 'buffered syslog refused');
