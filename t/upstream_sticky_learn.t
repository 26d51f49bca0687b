#!/usr/bin/perl

# sticky learn: sessions the upstream starts (its Set-Cookie, or a header)
# are learned into a shared zone and looked up from the request; they stick
# in both workers, survive a reload (HUP) and a binary upgrade (USR2), expire
# after `timeout` unused, and a full zone drops its oldest sessions.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_sticky/)->plan(15);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    # The backends: each answers with its name and starts the session the
    # request asks for (?new=ID).
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / {
            add_header Set-Cookie "sid=$arg_new; path=/";
            add_header X-Sess $arg_new;
            return 200 "b1";
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        location / {
            add_header Set-Cookie "sid=$arg_new; path=/";
            add_header X-Sess $arg_new;
            return 200 "b2";
        }
    }

    upstream lr {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        sticky learn create=$upstream_cookie_sid lookup=$cookie_sid zone=lr:1m;
    }
    upstream hv {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        sticky learn create=$upstream_http_x_sess lookup=$arg_s zone=hv:64k header;
    }
    upstream ex {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        sticky learn create=$upstream_cookie_sid lookup=$cookie_sid zone=ex:32k timeout=2s header;
    }
    upstream fl {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        sticky learn create=$upstream_cookie_sid lookup=$cookie_sid zone=fl:32k timeout=1h;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /lr { proxy_pass http://lr; }
        location /hv { proxy_pass http://hv; }
        location /ex { proxy_pass http://ex; }
        location /fl { proxy_pass http://fl; }
    }
}

EOF2

$t->run();

sub who {
	my ($uri, $cookie) = @_;
	my $c = defined $cookie ? "Cookie: $cookie\n" : '';
	my $r = http("GET $uri HTTP/1.0\nHost: localhost\n$c\n") // '';
	my ($b) = $r =~ /\r\n\r\n(b\d)$/;
	return $b // 'none';
}

# The backends that answered n requests with the session's cookie.
sub seen {
	my ($uri, $sid, $n) = @_;
	my %s;
	$s{who($uri, "sid=$sid")}++ for 1 .. ($n // 10);
	return join(',', sort keys %s);
}

# Sessions until each backend has started one: (session => backend).
sub learn_both {
	my ($uri, $prefix) = @_;
	my %at;
	for my $i (1 .. 20) {
		my $b = who("$uri?new=$prefix$i");
		$at{"$prefix$i"} = $b;
		my %by = reverse %at;
		last if $by{b1} && $by{b2};
	}
	return %at;
}

my %s = learn_both('/lr', 's');
my %by = reverse %s;
ok($by{b1} && $by{b2}, 'sessions started on both backends');
is(seen('/lr', $by{b1}), 'b1', 'a session learned from the cookie sticks (b1)');
is(seen('/lr', $by{b2}), 'b2', 'and another (b2)');
is(seen('/lr', 'never-seen'), 'b1,b2', 'an unknown session: round robin');

my %h = learn_both('/hv', 'h');
my %hby = reverse %h;
my %hs;
$hs{who("/hv?s=$hby{b2}")}++ for 1 .. 10;
is(join(',', keys %hs), 'b2', 'learned from a response header, looked up from an argument');

# Reload: the zone and its sessions stay.
ok($t->reload(), 'reloaded');
is(seen('/lr', $by{b1}) . ' ' . seen('/lr', $by{b2}), 'b1 b2', 'sessions survive a reload');

# Binary upgrade: the new binary takes the zone over.
my $old = $t->master();
sub pid_in {
	my $p = -e "$d/$_[0]" ? $t->read_file($_[0]) : '';
	chomp $p;
	return $p;
}
kill 'USR2', $old;
ok(poll_until(sub { pid_in('sluice.pid.oldbin') eq $old && pid_in('sluice.pid') ne ''
	&& pid_in('sluice.pid') ne $old }, 10), 'upgraded');
my $new = pid_in('sluice.pid');
kill 'WINCH', $old;
ok(poll_until(sub { my @w = grep { $_ != $new } $t->worker_pids(); !@w }, 10), 'the old workers are gone');
is(seen('/lr', $by{b1}) . ' ' . seen('/lr', $by{b2}), 'b1 b2', 'sessions survive a binary upgrade');
kill 'QUIT', $old;
ok($t->wait_exit(10), 'the old master exited');

# Expiry: unused for longer than timeout=2s, a session is gone.
my %e = learn_both('/ex', 'e');
my %eby = reverse %e;
is(seen('/ex', $eby{b2}, 6), 'b2', 'sticks before the timeout');
sleep 3.2;
is(seen('/ex', $eby{b2}), 'b1,b2', 'expired after the timeout');

# A full zone (32k: about 125 sessions) drops its oldest sessions.
my %f = learn_both('/fl', 'f');
my %fby = reverse %f;
my $first = $fby{b2};
who("/fl?new=x$_") for 1 .. 200;
is(seen('/fl', $first), 'b1,b2', 'the oldest session gave way');
my $last = who('/fl?new=last');
is(seen('/fl', 'last'), $last, 'the newest sticks');

kill 'QUIT', $new;
poll_until(sub { !kill 0, $new }, 10);
