#!/usr/bin/perl

# Binary upgrade (USR2): the pid file becomes .oldbin and the new master
# writes its own; both serve; WINCH stops the old workers; the new master
# serves the resolved peers it carried over in the zone while DNS is silent;
# if the new master exits the old one takes its pid file back and starts its
# workers again; QUIT of the old master removes .oldbin and keeps the unix
# socket the new one still uses.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(16);
$t->expect_errors(qr/\[alert\].*new binary process \d+ exited on signal/);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;

    upstream app { zone z 64k; server app.test:%%PORT_8081%% resolve; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen unix:%%TESTDIR%%/s.sock;
        location / { proxy_pass http://app; }
        location = /pid { return 200 "pid $pid"; }
    }
}

EOF

$t->write_file('dns.txt', "app.test A 127.0.0.2 30\n");
$t->dns(port(8053));
$t->backend(port(8081), addr => '127.0.0.2');
$t->run();
my $old = $t->master();

sub pid_in {
	my ($file) = @_;
	my $p = -e "$d/$file" ? $t->read_file($file) : '';
	chomp $p;
	return $p;
}

sub wait_for {
	my ($cond) = @_;
	for (1 .. 100) {
		return 1 if $cond->();
		sleep 0.05;
	}
	return 0;
}

sub addr {
	my ($r) = http_get('/x') =~ /^X-Addr: (\S+)/mi;
	return $r // 'none';
}

ok(wait_for(sub { addr() eq '127.0.0.2' }), 'resolved');
$t->write_file('dns.txt', "app.test SILENT\n");

# Upgrade, then stop the old workers.
kill 'USR2', $old;
ok(wait_for(sub { pid_in('sluice.pid.oldbin') eq $old && pid_in('sluice.pid') ne $old
	&& pid_in('sluice.pid') ne '' }), 'pid file renamed to .oldbin, the new master wrote its own');
my $new = pid_in('sluice.pid');
# Bursts of connections opened together: both generations accept some.
my %served;
for (1 .. 10) {
	my @c = map { http("GET /pid HTTP/1.0\nHost: x\n\n", start => 1) } 1 .. 20;
	for my $c (@c) {
		my ($p) = http_end($c) =~ /pid (\d+)/;
		$served{$p}++ if $p;
	}
	last if keys %served >= 2;
}
ok(keys %served >= 2, 'both masters\' workers serve');
kill 'WINCH', $old;
ok(wait_for(sub { my @w = grep { $_ != $new } $t->worker_pids(); !@w }), 'WINCH: the old workers are gone');
my $ok = 0;
$ok++ for grep { addr() eq '127.0.0.2' } 1 .. 10;
is($ok, 10, 'the new binary serves the carried-over peers with DNS silent');

# Rollback: the new master dies; the old one takes back its pid file and
# starts workers again.
kill 'KILL', $new;
ok(wait_for(sub { pid_in('sluice.pid') eq $old && !-e "$d/sluice.pid.oldbin" }),
	'new master gone: .oldbin renamed back');
ok($t->waitforlog(qr/new binary process $new exited on signal 9/), 'logged');
ok(wait_for(sub { http_get('/pid') =~ /pid \d+/ }), 'the old master serves again');

# Upgrade again and let the old master go.
kill 'USR2', $old;
ok(wait_for(sub { my $p = pid_in('sluice.pid'); $p ne '' && $p ne $old }), 'upgraded again');
$new = pid_in('sluice.pid');
kill 'QUIT', $old;
ok($t->wait_exit(10), 'old master exited on QUIT');
ok(!-e "$d/sluice.pid.oldbin", '.oldbin removed');
ok(-S "$d/s.sock" && http('GET /pid HTTP/1.0' . "\n\n", unix => "$d/s.sock") =~ /pid \d+/,
	'the unix socket the new master uses is kept');
is(addr(), '127.0.0.2', 'the new master serves');

# A second upgrade of the new master, now that its parent has exited, is
# accepted as nginx accepts it (not refused as "already upgrading").
kill 'USR2', $new;
ok(wait_for(sub { my $p = pid_in('sluice.pid'); $p ne '' && $p ne $new }), 'upgraded a second time');
my $newer = pid_in('sluice.pid');
kill 'QUIT', $new;
ok(wait_for(sub { !kill 0, $new }) && !-e "$d/sluice.pid.oldbin", 'the previous master exited');
unlike($t->read_file('error.log'), qr/\[alert\].*(?:USR2|upgrad)/i, 'no alert');
$new = $newer;

# Stop the new master by its pid.
kill 'QUIT', $new;
wait_for(sub { !kill 0, $new });
