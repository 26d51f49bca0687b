#!/usr/bin/perl

# health_check keepalive_time=: the checks of a peer reuse one keep-alive
# connection (no Connection: close) while it is younger than the time;
# without it every check opens its own connection and says Connection:
# close. A failed check closes its connection (the next one opens a new
# one); so does a check answer with Connection: close. The backends count
# the connections they accept and the requests they get.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(10);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream kept { zone kept 64k; server 127.0.0.1:%%PORT_8081%% max_fails=0; }
    upstream each { zone each 64k; server 127.0.0.1:%%PORT_8082%% max_fails=0; }
    upstream aged { zone aged 64k; server 127.0.0.1:%%PORT_8083%% max_fails=0; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass http://kept;
            health_check interval=100ms uri=/health keepalive_time=1h;
        }
        location /each/ {
            proxy_pass http://each;
            health_check interval=100ms uri=/health;
        }
        location /aged/ {
            proxy_pass http://aged;
            health_check interval=100ms uri=/health keepalive_time=1s;
        }
        location /api/ { api; }
    }
}

EOF

# A keep-alive HTTP/1.1 backend, one connection at a time (the checker
# has one at a time): each accept appends a line to acc_PORT.log, each
# request "URI close|keep" (its Connection: close or not) to req_PORT.log.
# The file hc_PORT, when there, holds the checks' status; "close" there
# makes it answer 200 with Connection: close and close.
sub backend {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		open my $acc, '>>', "$d/acc_$port.log"; print $acc "1\n"; close $acc;
		my $buf = '';
		while (1) {
			while ($buf !~ /\r\n\r\n/) {
				my $n = sysread($c, my $b, 4096);
				last unless $n;
				$buf .= $b;
			}
			last unless $buf =~ s/^(.*?)\r\n\r\n//s;
			my $head = $1;
			my ($uri) = $head =~ /^\S+ (\S+)/;
			my $close = $head =~ /^Connection:\s*close/mi ? 'close' : 'keep';
			open my $log, '>>', "$d/req_$port.log"; print $log "$uri $close\n"; close $log;
			my $status = 200;
			if (open my $f, '<', "$d/hc_$port") {
				my $s = <$f> // ''; chomp $s;
				$status = $s if $s ne '';
			}
			if ($status eq 'close') {
				print $c "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
				last;
			}
			print $c "HTTP/1.1 $status X\r\nContent-Length: 2\r\n\r\nok";
			last if $close eq 'close';
		}
		close $c;
	}
}

Test::Sluice::_release_ports();
for my $p (8081, 8082, 8083) {
	$t->run_daemon(\&backend, port($p));
	$t->waitforfile("$d/ready_" . port($p)) or die "backend $p";
}
$t->run();

my ($p1, $p2, $p3) = map { port($_) } (8081, 8082, 8083);

sub lines {
	my ($name) = @_;
	open my $f, '<', "$d/$name" or return ();
	return map { chomp; $_ } <$f>;
}
sub accepts { scalar(() = lines("acc_$_[0].log")) }
sub checks { scalar grep { /^\/health / } lines("req_$_[0].log") }

ok(poll_until(sub { checks($p1) >= 8 && checks($p2) >= 8 && checks($p3) >= 15 }, 10),
	'checks go on');
is(accepts($p1), 1, 'keepalive_time: the checks share one connection');
is(scalar(grep { / close$/ } lines("req_$p1.log")), 0, 'keepalive_time: no Connection: close');
my ($c2, $a2) = (checks($p2), accepts($p2));
ok($a2 >= $c2 && $a2 <= $c2 + 2, "without it: a connection per check ($a2 for $c2)");
is(scalar(grep { / keep$/ } lines("req_$p2.log")), 0, 'without it: Connection: close');
my ($a3, $c3) = (accepts($p3), checks($p3));
ok($a3 >= 2 && $a3 < $c3, "keepalive_time=1s: a new connection past the time ($a3 for $c3 checks)");

# A failed check closes its connection: the next one opens another.
$t->write_file("hc_$p1", '500');
ok(poll_until(sub { upstream_peer('kept', $p1)->{state} eq 'unhealthy' }, 5), 'a failing check');
my $a1 = accepts($p1);
ok(poll_until(sub { accepts($p1) >= $a1 + 2 }, 5), 'failed checks do not keep their connections');
unlink "$d/hc_$p1";
ok(poll_until(sub { upstream_peer('kept', $p1)->{state} eq 'up' }, 5), 'passing again');

# An answer with Connection: close ends the connection too.
$t->write_file("hc_$p1", 'close');
my ($a, $c) = (accepts($p1), checks($p1));
poll_until(sub { checks($p1) >= $c + 4 }, 5);
ok(accepts($p1) - $a >= 3, 'an answer with Connection: close: a new connection each check');
